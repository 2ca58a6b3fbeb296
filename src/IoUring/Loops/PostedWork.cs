using System.Diagnostics;
using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>
/// Work posted to a loop from other threads, and the eventfd that wakes the loop when it sleeps in io_uring_enter
/// (the loop keeps a READ armed on it). A poster costs no system call while the loop is awake: the loop announces its
/// sleep, then re-checks the queue (<see cref="TryBeginSleep"/>); a poster enqueues, then claims the wake
/// (<see cref="Post"/>). Either the loop sees the item or the poster sees the sleep (both sides use full fences).
/// </summary>
/// <remarks>Also the thread-pool work item of a deferred wake: only the poster that claimed the sleep queues
/// it.</remarks>
internal sealed unsafe class PostedWork(Action<Exception> report) : IThreadPoolWorkItem
{
    private readonly System.Collections.Concurrent.ConcurrentQueue<(Action<object?> Action, object? State)> _queue
        = new();
    private int _sleeping;        // 1 while the loop is (about to be) blocked in io_uring_enter
    private int _eventFd = -1;
    private ulong* _readTarget;   // the READ's 8 bytes; freed only once no request is in flight
    private int _writers;         // threads inside Wake: Close waits for them, so the fd number is not reused under one
    private long _wakes;

    /// <summary>Opens the eventfd (loop start, on the loop thread).</summary>
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

    /// <summary>Where the armed READ writes the eventfd's counter.</summary>
    public ulong* ReadTarget => _readTarget;

    /// <summary>eventfd writes so far, from any thread.</summary>
    public long Wakes => Interlocked.Read(ref _wakes);

    /// <summary>Whether the loop announced it sleeps: a hint, stale as soon as read.</summary>
    public bool IsSleeping => Volatile.Read(ref _sleeping) != 0;

    public bool IsEmpty => _queue.IsEmpty;

    /// <summary>
    /// Queues <paramref name="action"/> and wakes the loop if it sleeps: at once, or from a thread-pool thread after
    /// the work already queued there (a thread flushing a batch of responses would otherwise wake the loop at its
    /// first flush, and the loop would send them one by one).
    /// </summary>
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

    /// <summary>Loop thread, before blocking: announces the sleep, then re-checks the queue; false (do not block) if
    /// work came in meanwhile.</summary>
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

    /// <summary>Loop thread: awake again.</summary>
    public void EndSleep() => Volatile.Write(ref _sleeping, 0);

    /// <summary>Runs what was queued when it was called (a stream of posts must not starve completions); an exception
    /// is reported and the rest still runs.</summary>
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

    /// <summary>Writes the eventfd (any thread); nothing once closed.</summary>
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

    /// <summary>Loop teardown: closes the eventfd once no writer is inside <see cref="Wake"/>; frees the READ's target
    /// only if <paramref name="drained"/> (no request in flight may still write it).</summary>
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
