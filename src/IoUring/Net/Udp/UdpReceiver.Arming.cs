using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Arming the RECVMSG (loop thread): re-arming it after each end, cancelling it for a full queue (Pause) or the close,
// and the back-off TIMEOUT after a repeated ENOBUFS or an error that may persist.
internal sealed unsafe partial class UdpReceiver
{
    public void OnBackoffEnded()
    {
        _backingOff = false;
        MaybeRearm();
    }

    private void Pause()
    {
        _paused = true;
        CancelReceive();
    }

    private void Resume()
    {
        _paused = false;
        MaybeRearm();
    }

    private bool CanArm => !_armed && !_backingOff && !_paused && !_closing && !_owner.Loop.IsStopping;

    private void MaybeRearm()
    {
        if (!CanArm)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Receive);
        if (sqe == null)
        {
            BackOff(); // try again later rather than stay deaf
            return;
        }
        sqe->opcode = IORING_OP_RECVMSG;
        sqe->fd = _fd;
        // SAFETY: _message is freed only by Release, after the last request on the socket ended.
        sqe->addr = (ulong)_message;
        sqe->ioprio = IORING_RECV_MULTISHOT;
        sqe->flags = IOSQE_BUFFER_SELECT;
        sqe->buf_group = _buffers!.UseGroup();
        sqe->msg_flags = Libc.MSG_TRUNC; // the header then reports a cut datagram's real length
        _armed = true;
    }

    private void CancelReceive()
    {
        if (!_armed || _owner.Loop.IsStopping) // the stop cancels everything
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Cancel);
        if (sqe == null)
        {
            // Retry at the loop's next iteration (its submit makes room), or the close would wait for ever.
            _owner.Loop.RetryNextIteration(this, static r => r.CancelReceive());
            return;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = _owner.UserDataOf(UdpRequestKind.Receive);
    }

    private void BackOff()
    {
        if (!CanArm)
        {
            return;
        }
        _backingOff = true; // until the TIMEOUT ends: nothing re-arms before the pause, also while its SQE is retried
        SubmitBackoff();
    }

    private void SubmitBackoff()
    {
        if (_closing || _owner.Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.ReceiveBackoff);
        if (sqe == null)
        {
            // Not even the TIMEOUT got an SQE: retry it at the loop's next iteration, after its submit made room.
            _owner.Loop.RetryNextIteration(this, static r => r.SubmitBackoff());
            return;
        }
        ReceiveBackoff.Prepare(sqe);
    }
}
