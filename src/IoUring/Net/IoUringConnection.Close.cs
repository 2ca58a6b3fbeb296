using System.Diagnostics;
using System.Net.Sockets;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

public sealed partial class IoUringConnection
{
    private Socket? _socket;        // under the _closed lock
    private bool _fdReleased;       // under the _closed lock: no new Socket

    /// <summary>Closes the connection abortively: pending reads fail with <paramref name="reason"/>, unsent data is
    /// dropped, and the peer gets RST unless <see cref="IoUringNetworkOptions.AbortWithReset"/> is false. The first
    /// reason wins.</summary>
    public void Abort(Exception? reason) => Abort(reason, _settings.AbortWithReset);

    /// <summary>Nothing more is sent, even what was flushed before the loop closes.</summary>
    internal bool AbortRequested => Volatile.Read(ref _abortRequested) != 0;

    /// <summary>As <see cref="Abort(Exception?)"/>; reads fail with an <see cref="IOException"/>.</summary>
    public void Abort() => Abort(null, _settings.AbortWithReset);

    /// <summary>As <see cref="Abort(Exception?)"/>; the peer gets RST if <paramref name="reset"/>, else FIN.</summary>
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

    /// <summary>Closes gracefully: completes the pipes, sends the rest of the output and FIN, and waits until the fd
    /// is released. A peer that never reads keeps it waiting: <see cref="Abort(Exception?)"/> cuts it off.</summary>
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

    private void BeginAbortiveClose() => BeginClose(_abortReason, abortive: true);

    internal void OnDirectionEnded()
    {
        if (_receiver.Ended && _sender.Ended)
        {
            BeginClose(null, abortive: false);
        }
    }

    /// <summary>Abortive, so the peer cannot take a cut stream for whole.</summary>
    internal void Fail(Exception? reason) => BeginClose(reason, abortive: true);

    // Cancel each request in flight and wait for its final CQE, then CLOSE through the ring, so the fd number is not
    // reused while a request may still use it. Zero-copy notifications may come much later: only the memory waits.
    private unsafe void BeginClose(Exception? reason, bool abortive)
    {
        _owner.Loop.AssertOnLoopThread();
        if (_state != ConnectionState.Open)
        {
            return;
        }
        MoveTo(ConnectionState.Cancelling);
        _abortiveClose = abortive;
        if (abortive && (_abortRequested != 0 ? _abortWithReset : _settings.AbortWithReset))
        {
            // SO_LINGER {on, 0}: the close sends RST and drops unsent data
            Libc.linger linger = new() { l_onoff = 1, l_linger = 0 };
            _ = Libc.setsockopt(_fd, Libc.SOL_SOCKET, Libc.SO_LINGER, &linger, (uint)sizeof(Libc.linger));
        }
        _receiver.OnClosing(reason);
        _sender.OnClosing();
        if (_owner.InFlight > _sender.NotificationsPending)
        {
            // the last final CQE closes the fd
            CancelForClose();
        }
        else
        {
            SubmitClose();
        }
    }

    /// <summary>Called after each final completion.</summary>
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

    // A cancel with no SQE is retried next iteration, or the close would wait for ever. Once the loop is gone the retry
    // is dropped and the fd stays open: its requests may still use it.
    private void CancelForClose()
    {
        Debug.Assert(_state == ConnectionState.Cancelling, $"cancelling for close in state {_state}");
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
        Debug.Assert(_state == ConnectionState.ClosingFd, $"CLOSE submitted in state {_state}");
        sqe->opcode = IORING_OP_CLOSE;
        sqe->fd = _fd;
    }

    private void RetryOnLoop(Action<IoUringConnection> retry) => _owner.Loop.RetryNextIteration(this, retry);

    /// <summary>The loop ended before the CLOSE got an SQE: no request on the fd can still run. Any thread.</summary>
    private void CloseWithoutRing()
    {
        Debug.Assert(_state == ConnectionState.ClosingFd, $"closing the fd directly in state {_state}");
        _ = Libc.close(_fd);
        OnFdClosed();
        CheckCloseProgress();
    }

    internal void OnFdClosed() => MoveTo(ConnectionState.FdClosed);

    /// <summary>False when the loop had no SQE for the cancel.</summary>
    internal unsafe bool CancelRequest(ulong userData)
    {
        _owner.Loop.AssertOnLoopThread();
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Cancel);
        if (sqe == null)
        {
            return false;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = userData;
        return true;
    }

    private void OnClosed()
    {
        _settings.Registry?.Remove(this);
        _receiver.Input.CompleteWriter(null);
        // Before Closed completes: whoever saw it complete and asks for ConnectionClosed gets a cancelled token.
        Volatile.Write(ref _closedSignalled, 1);
        // the owner runs SignalClosed (no work item allocated per close)
        ThreadPool.UnsafeQueueUserWorkItem(_owner, preferLocal: false);
    }

    private void MoveTo(ConnectionState next)
    {
        Debug.Assert(next == _state + 1, $"illegal connection state change {_state} -> {next}");
        _state = next;
    }

    /// <summary>A <see cref="System.Net.Sockets.Socket"/> for options and addresses, over a duplicate of
    /// <see cref="FileDescriptor"/>, disposed when the connection closes. Disposing it keeps the connection; reading or
    /// writing through it bypasses the pipes.</summary>
    /// <exception cref="ObjectDisposedException">The connection has closed.</exception>
    public Socket Socket
    {
        get
        {
            lock (_closed)
            {
                ObjectDisposedException.ThrowIf(_fdReleased, this);
                if (_socket is null)
                {
                    // a duplicate, so its number stays the Socket's own while a call through it runs
                    int fd = Libc.fcntl(_fd, Libc.F_DUPFD_CLOEXEC, 0);
                    if (fd < 0)
                    {
                        throw SocketErrors.FromErrno(Libc.GetLastErrno());
                    }
                    // The handle owns the duplicate: disposing it is the one close (a close(fd) too would let its
                    // finalizer close the number again, by then perhaps another socket's).
                    var handle = new SafeSocketHandle(fd, ownsHandle: true);
                    try
                    {
                        _socket = new Socket(handle);
                    }
                    catch
                    {
                        handle.Dispose();
                        throw;
                    }
                }
                return _socket;
            }
        }
    }

    /// <summary>Disposes the Socket handed out: its handle closes the duplicate once no call through it runs.</summary>
    private void ReleaseSocket()
    {
        Debug.Assert(_state == ConnectionState.ClosingFd, $"Socket released in state {_state}");
        Socket? socket;
        lock (_closed)
        {
            _fdReleased = true;
            socket = _socket;
        }
        if (socket is null)
        {
            return;
        }
        try
        {
            if (!_abortiveClose)
            {
                // FIN was sent: telling the Socket keeps its close graceful if it interrupts a call.
                socket.Shutdown(SocketShutdown.Send);
            }
        }
        catch (SocketException)
        {
            // already closed by the peer
        }
        catch (ObjectDisposedException)
        {
            // the application disposed it
        }
        try
        {
            socket.Dispose();
        }
        catch (Exception ex)
        {
            // the close goes on whatever the Socket's teardown throws
            _owner.Loop.ReportUnhandled(ex);
        }
    }
}
