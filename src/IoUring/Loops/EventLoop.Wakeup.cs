using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

// Work from other threads: the queue of posted actions, and the eventfd that wakes a loop blocked in io_uring_enter.
// A poster costs no system call while the loop is busy: it wakes the loop only when the loop announced it sleeps.
public sealed unsafe partial class EventLoop
{
    private readonly System.Collections.Concurrent.ConcurrentQueue<WorkItem> _posted = new();
    private readonly DeferredWake _deferredWake;
    private int _sleeping;          // 1 while the loop is (about to be) blocked in io_uring_enter
    private int _eventFd = -1;
    private ulong* _eventFdValue;   // the wakeup READ's 8-byte target; freed after the loop's last completion
    private int _wakersWriting;     // threads inside Wake (see CloseWakeup)
    private long _wakeups;          // eventfd writes, counted from whichever thread makes them

    /// <summary>Runs <paramref name="action"/> on the loop thread. Safe from any thread; never runs it
    /// inline.</summary>
    /// <remarks>
    /// Once the loop has stopped (see <see cref="Stopped"/>) the action runs on the thread pool instead (or on the loop
    /// thread, if it races that thread's last look at its queue as it leaves), and does not
    /// throw here: this is the loop's <see cref="System.IO.Pipelines.PipeScheduler"/> entry point, which pipes call
    /// from the application's calls (completing a pipe, say) and which must not throw at them. Ring access from such an
    /// action throws <see cref="ObjectDisposedException"/> (a <see cref="RingHandler"/>'s Submit,
    /// <see cref="InvalidOperationException"/>: not on the loop thread), which is reported to
    /// <see cref="EventLoopOptions.UnhandledException"/>.
    /// </remarks>
    public override void Schedule(Action<object?> action, object? state)
    {
        ArgumentNullException.ThrowIfNull(action);
        _posted.Enqueue(new WorkItem(action, state));
        if (_stopped.Task.IsCompleted)
        {
            // The loop stopped (maybe between the enqueue and this check, after its last look at the queue): run it
            // elsewhere, as the loop would have (it finds the ring gone), so nothing is lost.
            System.Threading.ThreadPool.UnsafeQueueUserWorkItem(
                static loop => loop.RunPostedWork(), this, preferLocal: false);
            return;
        }
        // Dekker pairing with the loop's sleep check: the enqueue above is a full fence, the loop publishes
        // _sleeping with Interchange before re-checking the queue; one of the two sides sees the other.
        if (Volatile.Read(ref _sleeping) != 0 && Interlocked.Exchange(ref _sleeping, 0) != 0)
        {
            if (Thread.CurrentThread.IsThreadPoolThread)
            {
                // Wake it after the work already queued on the thread pool, not now: an application thread flushing
                // responses (16 pipelined ones, or one per connection of a loop's batch) would otherwise wake the loop
                // at the first flush (on a busy CPU the woken loop preempts it) and it would send them one by one.
                // Later posters find _sleeping cleared, so one wake serves the whole batch (like Kestrel's IOQueue).
                System.Threading.ThreadPool.UnsafeQueueUserWorkItem(_deferredWake, preferLocal: false);
            }
            else
            {
                Wake();
            }
        }
    }

    /// <summary>As <see cref="Schedule"/>, for callers that must know the loop is gone rather than run the action
    /// elsewhere.</summary>
    /// <exception cref="ObjectDisposedException">The loop has stopped.</exception>
    internal void Post(Action<object?> action, object? state)
    {
        if (_stopped.Task.IsCompleted)
        {
            throw new ObjectDisposedException(nameof(EventLoop), "The event loop has stopped.");
        }
        Schedule(action, state);
    }

    /// <summary>
    /// As <see cref="Post"/>, and a sleeping loop is woken at once, also from a thread-pool thread: for a caller that
    /// blocks until the work has run (a deferred wake would wait for the thread pool the caller is holding a thread
    /// of). Costs an eventfd write each time: not for hot paths.
    /// </summary>
    internal void PostAndWake(Action<object?> action, object? state)
    {
        Post(action, state);
        Wake();
    }

    /// <summary>Before blocking: announce the sleep, then re-check the queue. False if work came in meanwhile (do not
    /// block).</summary>
    /// <remarks>A poster either sees _sleeping and wakes us, or we see its item.</remarks>
    private bool PrepareToSleep()
    {
        Interlocked.Exchange(ref _sleeping, 1);
        if (!_posted.IsEmpty)
        {
            Volatile.Write(ref _sleeping, 0);
            return false;
        }
        return true;
    }

    private void AfterSleep() => Volatile.Write(ref _sleeping, 0);

    private bool HasPostedWork => !_posted.IsEmpty;

    /// <summary>
    /// Whether the loop announced it sleeps (any thread; a hint, stale as soon as read): work posted now would cost an
    /// eventfd write and a wake-up, so a poster that can do the work itself at the cost of one system call may prefer
    /// to.
    /// </summary>
    internal bool IsSleeping => Volatile.Read(ref _sleeping) != 0;

    private void RunPostedWork()
    {
        // Bounded so a stream of posts cannot starve completions.
        int count = _posted.Count;
        while (count-- > 0 && _posted.TryDequeue(out WorkItem item))
        {
            try
            {
                item.Action(item.State);
            }
            catch (Exception ex)
            {
                ReportUnhandled(ex);
            }
        }
    }

    // A reusable thread-pool work item (a lambda with state would allocate one per wake). At most one is queued.
    private sealed class DeferredWake(EventLoop loop) : IThreadPoolWorkItem
    {
        public void Execute() => loop.Wake();
    }

    private void Wake()
    {
        // Counted in, so the loop's teardown never closes the eventfd (whose number could then be reused) under a
        // write.
        Interlocked.Increment(ref _wakersWriting);
        int fd = Volatile.Read(ref _eventFd);
        if (fd >= 0)
        {
            ulong one = 1;
            _ = Libc.write(fd, &one, sizeof(ulong));
            Interlocked.Increment(ref _wakeups); // any thread: a plain ++ on the loop's counters lost counts
        }
        Interlocked.Decrement(ref _wakersWriting);
    }

    /// <summary>Loop start: the eventfd and the READ the loop keeps armed on it.</summary>
    private void OpenWakeup()
    {
        _eventFd = Libc.eventfd(0, Libc.EFD_CLOEXEC | Libc.EFD_NONBLOCK);
        if (_eventFd < 0)
        {
            throw IoUringException.FromErrno("eventfd", Libc.GetLastErrno());
        }
        _eventFdValue = (ulong*)System.Runtime.InteropServices.NativeMemory.Alloc(sizeof(ulong));
        ArmWakeup();
    }

    /// <summary>
    /// Arms the READ on the eventfd. Without an SQE for it (the SQ stayed full after an early submit) the loop would
    /// sleep deaf to posts: it is reported, retried every iteration, and until it is armed the loop sleeps at most
    /// <see cref="DisarmedSleep"/> at a time, so posts still run.
    /// </summary>
    private void ArmWakeup()
    {
        io_uring_sqe* sqe = TryNewSqe(_loopRingOwner, LoopRingOwner.KindWakeup);
        _wakeupDisarmed = sqe == null;
        if (sqe == null)
        {
            return;
        }
        sqe->opcode = IORING_OP_READ;
        sqe->fd = _eventFd;
        // SAFETY: _eventFdValue is freed only by CloseWakeup once nothing is in flight (drained).
        sqe->addr = (ulong)_eventFdValue;
        sqe->len = sizeof(ulong);
        sqe->off = ulong.MaxValue; // read at the current position (eventfd has none)
    }

    private bool _wakeupDisarmed; // the eventfd's READ could not be re-armed: retry, and sleep bounded meanwhile
    private const long DisarmedSleep = 10_000_000; // ns

    /// <summary>Loop teardown. <paramref name="drained"/>: no request is in flight, so the READ's target can be
    /// freed.</summary>
    private void CloseWakeup(bool drained)
    {
        if (drained && _eventFdValue != null)
        {
            System.Runtime.InteropServices.NativeMemory.Free(_eventFdValue);
            _eventFdValue = null;
        }
        int eventFd = Interlocked.Exchange(ref _eventFd, -1);
        if (eventFd >= 0)
        {
            SpinWait spin = default;
            while (Volatile.Read(ref _wakersWriting) != 0)
            {
                spin.SpinOnce(); // a write in progress finishes in microseconds
            }
            _ = Libc.close(eventFd);
        }
    }

    private readonly record struct WorkItem(Action<object?> Action, object? State);
}
