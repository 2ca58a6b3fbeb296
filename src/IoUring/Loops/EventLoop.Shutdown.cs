using System.Diagnostics;
using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

// Stopping: owners close first (Stopping), then everything is cancelled and the loop waits for the final CQEs within a
// deadline, but not for zero-copy notifications: they hold memory, not an fd, and may come only when a peer acks.
public sealed unsafe partial class EventLoop
{
    private static readonly TimeSpan s_shutdownDeadline = TimeSpan.FromSeconds(10);

    private readonly TaskCompletionSource _stopped = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private int _stopRequested;
    private bool _stopping;         // loop thread's view: cancelling everything, refusing new requests
    private long _shutdownStarted;
    private int _notificationsPending;

    /// <summary>Completes when the loop thread has stopped and released everything.</summary>
    public Task Stopped => _stopped.Task;

    internal bool IsStopping => _stopping;

    /// <summary>Raised on the loop thread when it starts stopping, before everything is cancelled.</summary>
    internal event Action? Stopping;

    /// <summary>Stops the loop and waits for it (see the class remarks). Safe to call more than once.</summary>
    public void Dispose()
    {
        RequestStop();
        if (!IsOnLoopThread)
        {
            _thread.Join();
        }
    }

    /// <summary>Asks the loop to stop; <see cref="Stopped"/> completes when it has.</summary>
    public Task StopAsync()
    {
        RequestStop();
        return _stopped.Task;
    }

    /// <summary>Only a zero-copy send's notification is left in flight: a stop does not wait for it.</summary>
    internal void OnNotificationPending()
    {
        AssertOnLoopThread();
        _notificationsPending++;
        Debug.Assert(_notificationsPending <= _inFlight, "a pending notification is a request in flight");
    }

    internal void OnNotificationArrived()
    {
        AssertOnLoopThread();
        Debug.Assert(_notificationsPending > 0, "a notification arrived that was not pending");
        _notificationsPending--;
    }

    internal int NotificationsPending => Volatile.Read(ref _notificationsPending);

    private bool HasRequestsToWaitFor => _inFlight > _notificationsPending;

    private bool ShutdownDeadlinePassed => _stopping
        && Stopwatch.GetElapsedTime(_shutdownStarted) > (_options.Hooks?.ShutdownDeadline ?? s_shutdownDeadline);

    private void RequestStop()
    {
        if (Interlocked.Exchange(ref _stopRequested, 1) == 0 && !_stopped.Task.IsCompleted)
        {
            try
            {
                Post(static s => ((EventLoop)s!).BeginStop(), this);
            }
            catch (ObjectDisposedException)
            {
                // It stopped by itself in the meantime.
            }
        }
    }

    private void BeginStop()
    {
        AssertOnLoopThread();
        if (_stopping)
        {
            return;
        }
        _stopping = true;
        _shutdownStarted = Stopwatch.GetTimestamp();
        try
        {
            Stopping?.Invoke();
        }
        catch (Exception ex)
        {
            ReportUnhandled(ex); // the cancel below must still go out, or the stop waits for its deadline
        }
        SubmitStopCancel();
    }

    private bool _stopCancelPending; // the stop's cancel got no SQE: DrainAfterStop retries it

    /// <summary>Each request still posts its final CQE.</summary>
    private void SubmitStopCancel()
    {
        io_uring_sqe* sqe = TryNewSqe(_loopRingOwner, LoopRingOwner.KindCancel);
        _stopCancelPending = sqe == null;
        if (sqe != null)
        {
            sqe->opcode = IORING_OP_ASYNC_CANCEL;
            sqe->cancel_flags = IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL;
        }
    }

    private void DrainAfterStop()
    {
        while ((HasRequestsToWaitFor || HasPostedWork) && !ShutdownDeadlinePassed)
        {
            if (_stopCancelPending)
            {
                SubmitStopCancel();
            }
            RunOnce();
        }
    }

    // Notifications the final closes released (an aborted socket drops its data at once): one non-blocking pass.
    private void CollectReleasedNotifications()
    {
        if (_notificationsPending > 0)
        {
            SubmitAndWait(wait: false);
            DrainCompletions();
        }
    }

    /// <summary>Stops as far as the broken ring still works; if that fails too, closing the ring makes the kernel
    /// cancel what is left.</summary>
    private void StopAfterFailure()
    {
        try
        {
            BeginStop();
            DrainAfterStop();
        }
        catch (Exception ex)
        {
            ReportUnhandled(ex);
        }
    }

    private void ReleaseResources(bool drained)
    {
        if (!drained)
        {
            // Requests still in flight may write into the receive buffers or the wakeup value: leak them rather than
            // free memory the kernel may still use.
            ReportUnhandled(new IoUringException(
                $"The event loop stopped with {_inFlight} requests still in flight; their memory is kept.",
                Errno.EBUSY));
            // Their completions will never be read: fail the file reads' awaiters now.
            _fileReads?.AbandonInFlight();
            _receiveBuffers?.Spares.OnStopped(); // blocks taken by connections must still come back
        }
        else
        {
            _receiveBuffers?.Dispose();
        }
        _posted.Close(drained);
        _loopRingOwner.Release();
        // Blocks the kernel may still use (pending notifications, undrained requests) stay out of the pools for good.
        bool kernelKeepsPins = !drained || _notificationsPending > 0;
        _memory.Shutdown(kernelKeepsPins);
        _ring.Dispose();
    }
}
