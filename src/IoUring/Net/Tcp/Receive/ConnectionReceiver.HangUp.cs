using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// The hang-up poll (see the class remarks): a one-shot POLL_ADD that notices the peer's FIN, reset or a socket error,
// and the restart of a RECV that may wait for a wakeup that will not come.
internal sealed partial class ConnectionReceiver
{
    /// <summary>Arms the one-shot poll that notices the peer's FIN or reset (see the class remarks).</summary>
    public unsafe void ArmHangUpPoll()
    {
        if (_hangUpArmed || _connection.IsClosing || _owner.Loop.IsStopping)
        {
            return; // a retry that came after the close began, or after the stop's cancel-all
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.HangUpPoll);
        if (sqe == null)
        {
            // No SQE (the SQ stayed full after an early submit): again next iteration, so starting a connection cannot
            // throw.
            _owner.Loop.RetryNextIteration(this, static r => r.ArmHangUpPoll());
            return;
        }
        sqe->opcode = IORING_OP_POLL_ADD;
        sqe->fd = _fd;
        sqe->poll32_events = PollRdHup;
        _hangUpArmed = true;
    }

    public void OnHangUp(int result)
    {
        _hangUpArmed = false;
        if (result <= 0)
        {
            return; // cancelled at close
        }
        _peerHungUp = true;
        if (((uint)result & (PollErr | PollHup)) != 0)
        {
            RestartWaiting(); // a reset or an error; a FIN alone the RECV sees by itself
        }
    }

    // The armed RECV may be waiting for a wakeup that will not come: cancel it; its ECANCELED arms a new one.
    private void RestartWaiting()
    {
        if (_armed && !_paused && !_ended && !_connection.IsClosing)
        {
            CancelOrRetry();
        }
    }
}
