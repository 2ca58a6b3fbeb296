using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Ending the connection: Abort and DisposeAsync (any thread), and on the loop thread the close itself, through
// ConnectionState's steps: cancel what is in flight, wait for the final CQEs, close the fd through the ring.
public sealed partial class IoUringConnection
{
    /// <summary>
    /// Closes the connection abortively: pending reads fail with <paramref name="reason"/>, unsent data is dropped and
    /// the peer gets RST (unless <see cref="IoUringNetworkOptions.AbortWithReset"/> is false). The first reason wins.
    /// </summary>
    public void Abort(Exception? reason) => Abort(reason, _settings.AbortWithReset);

    /// <summary>Abort was called (any thread): from then on nothing more is sent, also what is flushed before the loop
    /// closes.</summary>
    internal bool AbortRequested => Volatile.Read(ref _abortRequested) != 0;

    /// <summary>As <see cref="Abort(Exception?)"/> with the default reason (reads fail with an
    /// <see cref="IOException"/>).</summary>
    public void Abort() => Abort(null, _settings.AbortWithReset);

    /// <summary>As <see cref="Abort(Exception?)"/>, choosing per call whether the peer gets RST
    /// (<paramref name="reset"/>) or FIN.</summary>
    public void Abort(Exception? reason, bool reset)
    {
        if (Interlocked.Exchange(ref _abortRequested, 1) != 0)
        {
            return;
        }
        _abortReason = reason ?? _settings.CreateAbortedException("The connection was aborted by the application.");
        _abortWithReset = reset;
        ScheduleOnLoop(static c => ((IoUringConnection)c!).BeginAbortiveClose());
    }

    /// <summary>
    /// Ends the connection gracefully and waits until its fd is released: completes <see cref="Input"/> and
    /// <see cref="Output"/> if the application has not, sends what is left of the output followed by FIN, then closes.
    /// A peer that never reads keeps it waiting: use <see cref="Abort(Exception?)"/> to cut it off.
    /// </summary>
    public ValueTask DisposeAsync()
    {
        try
        {
            _receiver.Input.Complete();
            _output.Complete();
            ScheduleOnLoop(static c => ((IoUringConnection)c!)._receiver.OnReaderGone());
        }
        catch (Exception ex)
        {
            return ValueTask.FromException(ex); // as an async method would: the caller sees it when it awaits
        }
        return new ValueTask(_closed.Task);
    }

    // ---- lifecycle (loop thread) ----

    private void BeginAbortiveClose() => BeginClose(_abortReason, abortive: true);

    /// <summary>The receiver or the sender reached its end: close gracefully once both have.</summary>
    internal void OnDirectionEnded()
    {
        if (_receiver.Ended && _sender.Ended)
        {
            BeginClose(null, abortive: false);
        }
    }

    /// <summary>Receiving or sending failed (or a handler threw): close abortively, so the peer cannot take the stream
    /// for complete.</summary>
    internal void Fail(Exception? reason) => BeginClose(reason, abortive: true);

    // Closing: cancel each request in flight (by user_data), wait for each final CQE, then close through the ring, so
    // the fd number cannot be reused while a request on it may still run. Then tell the application. Zero-copy
    // notifications are not waited for: they may come minutes later (unacknowledged data keeps the kernel's hold on the
    // memory until the peer acknowledges it or goes away), so only the memory waits: the pins and the handle are freed
    // after the last one.
    private unsafe void BeginClose(Exception? reason, bool abortive)
    {
        if (_state != ConnectionState.Open)
        {
            return;
        }
        MoveTo(ConnectionState.Cancelling);
        _abortiveClose = abortive;
        if (abortive && (_abortRequested != 0 ? _abortWithReset : _settings.AbortWithReset))
        {
            // SO_LINGER {on, 0}: close sends RST and drops unsent data, as Kestrel's Sockets transport does on abort.
            Libc.linger linger = new() { l_onoff = 1, l_linger = 0 };
            _ = Libc.setsockopt(_fd, Libc.SOL_SOCKET, Libc.SO_LINGER, &linger, (uint)sizeof(Libc.linger));
        }
        _receiver.OnClosing(reason);
        _sender.OnClosing();
        if (_owner.InFlight > _sender.NotificationsPending)
        {
            // What is left in flight then (these cancels, an earlier one) ends by itself; the last final CQE closes the
            // fd.
            CancelForClose();
        }
        else
        {
            SubmitClose();
        }
    }

    /// <summary>After each final completion: close the fd once only notifications remain in flight; finish once it is
    /// closed.</summary>
    internal void CheckCloseProgress()
    {
        if (_state == ConnectionState.Cancelling && _owner.InFlight == _sender.NotificationsPending)
        {
            SubmitClose();
        }
        else if (_state == ConnectionState.FdClosed)
        {
            MoveTo(ConnectionState.Closed);
            OnClosed();
            _owner.Release(); // frees the handle now, or after the last notification (OnFreed)
        }
    }

    // A cancel the loop had no SQE for (the SQ stayed full after an early submit) is tried again next iteration, or the
    // close would wait for ever; cancelling a request twice is harmless (the second finds nothing). Once the loop is
    // gone the retry is dropped: its requests still in the kernel may use the fd, which therefore stays open.
    private void CancelForClose()
    {
        if (!(_receiver.CancelForClose() & _sender.CancelForClose()))
        {
            RetryOnLoop(static c => c.CancelForClose());
        }
    }

    private void SubmitClose()
    {
        MoveTo(ConnectionState.ClosingFd);
        ReleaseSocket();
        SubmitCloseRequest();
    }

    private unsafe void SubmitCloseRequest()
    {
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Close);
        if (sqe == null)
        {
            _owner.Loop.RetryNextIteration(this, static c => c.SubmitCloseRequest(), static c => c.CloseWithoutRing());
            return;
        }
        sqe->opcode = IORING_OP_CLOSE;
        sqe->fd = _fd;
    }

    private void RetryOnLoop(Action<IoUringConnection> retry) => _owner.Loop.RetryNextIteration(this, retry);

    /// <summary>
    /// The loop went with the CLOSE still waiting for an SQE: no request on the fd runs any more (only zero-copy
    /// notifications may be pending, which hold memory, not the fd), so it is closed here, and the close finishes as
    /// the CLOSE's completion would have finished it. Any thread, the loop gone.
    /// </summary>
    private void CloseWithoutRing()
    {
        Debug.Assert(_state == ConnectionState.ClosingFd, $"closing the fd directly in state {_state}");
        _ = Libc.close(_fd);
        OnFdClosed();
        CheckCloseProgress();
    }

    internal void OnFdClosed() => MoveTo(ConnectionState.FdClosed);

    /// <summary>
    /// Cancels this connection's request whose user_data is <paramref name="userData"/> (found by hash: no walk). False
    /// when the loop had no SQE for it (reported).
    /// </summary>
    internal unsafe bool CancelRequest(ulong userData)
    {
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Cancel);
        if (sqe == null)
        {
            return false;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = userData;
        return true;
    }

    /// <summary>The fd is closed and no request but zero-copy notifications is in flight: the connection is
    /// closed.</summary>
    private void OnClosed()
    {
        _settings.Registry?.Remove(this);
        _receiver.Input.CompleteWriter(null);
        // Before Closed completes: whoever saw Closed complete and asks for ConnectionClosed gets a cancelled token.
        Volatile.Write(ref _closedSignalled, 1);
        // runs SignalClosed (no work item allocated per close)
        ThreadPool.UnsafeQueueUserWorkItem(_owner, preferLocal: false);
    }

    private void MoveTo(ConnectionState next)
    {
        Debug.Assert(next == _state + 1, $"illegal connection state change {_state} -> {next}");
        _state = next;
    }
}
