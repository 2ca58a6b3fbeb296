using System.Diagnostics;
using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>Work posted to a loop from other threads, and the eventfd that wakes it from io_uring_enter. The loop
/// announces its sleep, then re-checks the queue (<see cref="TryBeginSleep"/>); a poster enqueues, then claims the
/// wake (<see cref="Post"/>). With full fences on both sides, either the loop sees the item or the poster sees the
/// sleep.</summary>
/// <remarks>Also the deferred wake's work item.</remarks>
internal sealed unsafe class PostedWork(Action<Exception> report) : IThreadPoolWorkItem
{
    private readonly System.Collections.Concurrent.ConcurrentQueue<(Action<object?> Action, object? State)> _queue
        = new();
    private int _sleeping;        // 1 while the loop is (about to be) blocked in io_uring_enter
    private int _eventFd = -1;
    private ulong* _readTarget;   // the READ's 8 bytes; freed only once no request is in flight
    private int _writers;         // threads inside Wake: Close waits for them, so the fd number is not reused under one
    private long _wakes;

    public void Open()
    {
        Debug.Assert(_eventFd < 0, "the wakeup is opened once");
        _eventFd = Libc.eventfd(0, Libc.EFD_CLOEXEC | Libc.EFD_NONBLOCK);
        if (_eventFd < 0)
        {
            throw IoUringException.FromErrno("eventfd", Libc.GetLastErrno());
        }
        _readTarget = (ulong*)NativeMemory.Alloc(sizeof(ulong));
    }

    public int FileDescriptor => _eventFd;

    public ulong* ReadTarget => _readTarget;

    public long Wakes => Interlocked.Read(ref _wakes);

    /// <summary>A hint, stale as soon as read.</summary>
    public bool IsSleeping => Volatile.Read(ref _sleeping) != 0;

    public bool IsEmpty => _queue.IsEmpty;

    /// <summary>A thread-pool poster defers the wake behind its queued work, so a batch of flushes wakes the loop
    /// once.</summary>
    public void Post(Action<object?> action, object? state)
    {
        _queue.Enqueue((action, state));
        if (Volatile.Read(ref _sleeping) != 0 && Interlocked.Exchange(ref _sleeping, 0) != 0)
        {
            if (Thread.CurrentThread.IsThreadPoolThread)
            {
                ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);
            }
            else
            {
                Wake();
            }
        }
    }

    /// <summary>False (do not block) if work came in after the sleep was announced.</summary>
    public bool TryBeginSleep()
    {
        Interlocked.Exchange(ref _sleeping, 1);
        if (!_queue.IsEmpty)
        {
            Volatile.Write(ref _sleeping, 0);
            return false;
        }
        return true;
    }

    public void EndSleep() => Volatile.Write(ref _sleeping, 0);

    /// <summary>Runs only what was queued at the call, so a stream of posts cannot starve completions.</summary>
    public void Run()
    {
        int count = _queue.Count;
        while (count-- > 0 && _queue.TryDequeue(out var item))
        {
            try
            {
                item.Action(item.State);
            }
            catch (Exception ex)
            {
                report(ex);
            }
        }
    }

    // Any thread; nothing once closed.
    public void Wake()
    {
        Interlocked.Increment(ref _writers);
        int fd = Volatile.Read(ref _eventFd);
        if (fd >= 0)
        {
            ulong one = 1;
            _ = Libc.write(fd, &one, sizeof(ulong));
            Interlocked.Increment(ref _wakes);
        }
        Interlocked.Decrement(ref _writers);
    }

    void IThreadPoolWorkItem.Execute() => Wake();

    /// <summary>Frees the READ's target only if <paramref name="drained"/>.</summary>
    public void Close(bool drained)
    {
        if (drained && _readTarget != null)
        {
            NativeMemory.Free(_readTarget);
            _readTarget = null;
        }
        int eventFd = Interlocked.Exchange(ref _eventFd, -1);
        if (eventFd >= 0)
        {
            SpinWait spin = default;
            while (Volatile.Read(ref _writers) != 0)
            {
                spin.SpinOnce(); // a write in progress finishes in microseconds
            }
            _ = Libc.close(eventFd);
        }
    }
}
