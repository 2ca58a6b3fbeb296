using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// One POLL_ADD for POLLRDHUP (POLLHUP and POLLERR come with it) on a connection's socket, so that Kestrel hears of
/// the peer's FIN or RST while the application is not reading: Kestrel's contract is that ConnectionClosed fires
/// then (it cancels HttpContext.RequestAborted), as the Sockets transport's always-running receive loop makes it.
/// </summary>
/// <remarks>
/// <para>The connection layer sees the FIN too but does not expose it; when it does, this watcher can go.</para>
/// <para>Lifetime: the poll holds a reference to the socket, so it must not outlive the connection's close. It is
/// armed on the loop only while the connection is open, and cancelled by its user_data (never by fd: the number may
/// already belong to another socket) before the transport asks the connection to close. The connection's own
/// close cancels every request on the fd as well. Everything but the constructor runs on the loop thread.</para>
/// </remarks>
internal sealed unsafe class PeerHangupWatcher : RingOwner
{
    private const uint KindPoll = 1;
    private const uint KindCancel = 2;
    private const uint POLLERR = 0x0008;
    private const uint POLLRDHUP = 0x2000;

    private readonly IoUringConnectionContext _context;
    private bool _armed;
    private bool _stopped;

    public PeerHangupWatcher(EventLoop loop, IoUringConnectionContext context) : base(loop)
    {
        _context = context;
    }

    /// <summary>Arms the poll unless the connection has closed or the watcher was stopped meanwhile.</summary>
    public void Start(int fd, bool connectionClosed)
    {
        if (_stopped || connectionClosed || Loop.IsStopping)
        {
            Stop();
            return;
        }
        io_uring_sqe* sqe = Loop.GetSqe(this, KindPoll);
        sqe->opcode = IORING_OP_POLL_ADD;
        sqe->fd = fd;
        sqe->poll32_events = POLLRDHUP;
        _armed = true;
    }

    /// <summary>Cancels the poll if it is armed; the watcher is released once nothing of it is in flight.</summary>
    public void Stop()
    {
        if (_stopped)
        {
            return;
        }
        _stopped = true;
        if (_armed && !Loop.IsStopping) // a stopping loop cancels everything itself
        {
            io_uring_sqe* sqe = Loop.GetSqe(this, KindCancel);
            sqe->opcode = IORING_OP_ASYNC_CANCEL;
            sqe->addr = UserDataOf(KindPoll);
        }
        Release();
    }

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        if (kind != KindPoll)
        {
            return;
        }
        _armed = false;
        if (result > 0 && !_stopped)
        {
            _context.OnPeerHangup(reset: ((uint)result & POLLERR) != 0);
        }
        // One-shot: whatever the result (events, ECANCELED, EBADF), there is nothing more to watch.
        Stop();
    }
}
