using System.IO.Pipelines;
using System.Runtime.InteropServices;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Receiving: one multishot RECV with buffer select; bytes are copied into Input and the buffer goes straight back.
//
// A multishot RECV can miss a reset (seen on 6.18). When a read leaves the socket empty (a CQE with F_MORE but without
// F_SOCK_NONEMPTY), the RECV waits for its poll's next wakeup. A FIN counts as not empty, so the RECV goes on to read
// the EOF; a pending reset error does not, and only a read that finds the socket empty returns it. The reset's own
// wakeup normally brings that read, but a RECV armed after the RST arrived (on resuming from a backpressure pause, or
// after ENOBUFS) gets one look at the ready socket, spends it on the bytes queued ahead of the RST (more than it reads
// at submit: 32 buffers), and then waits forever on the dead socket. So a one-shot POLL_ADD per connection watches for
// the peer's FIN, reset or a socket error; once it has fired, a RECV that may be waiting is restarted (cancelled, and
// its ECANCELED re-arms it): the new RECV reads what is left, or finds the socket empty and reports the error.
public sealed partial class IoUringConnection
{
    private const uint PollErr = 0x8, PollHup = 0x10, PollRdHup = 0x2000; // POLLERR and POLLHUP are always reported

    // How long a receive waits before re-arming when the buffer ring stays empty. Process lifetime (never freed): every
    // connection's backoff TIMEOUT points at it, and the kernel reads it when the request is submitted.
    private static readonly unsafe __kernel_timespec* s_receiveBackoff = NewTimespec(TimeSpan.FromMilliseconds(10));

    private readonly Action _onFlushCompleted;
    private ValueTask<FlushResult> _pendingFlush;
    private bool _receiveArmed;     // a RECV is in flight (until its final CQE)
    private bool _receivePaused;    // Input's flush did not complete: backpressure
    private bool _receiveEnded;     // FIN, error, the reader went away, or closing
    private bool _unflushed;        // bytes written to Input since the last flush
    private bool _receiveBackingOff; // a backoff TIMEOUT is in flight: re-arm when it ends
    private bool _peerHungUp;       // the hang-up poll fired: the peer's FIN or reset (or an error) reached the socket
    private int _exhaustionMark = -1; // the buffer ring's RecycleMark at this connection's last ENOBUFS (-1: none yet)
    private long _bytesReceived;

    private unsafe void ArmReceive()
    {
        io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindReceive);
        sqe->opcode = IORING_OP_RECV;
        sqe->fd = _fd;
        sqe->ioprio = IORING_RECV_MULTISHOT;
        sqe->flags = IOSQE_BUFFER_SELECT;
        sqe->buf_group = _owner.Loop.BufferRing.GroupId;
        _receiveArmed = true;
    }

    private void MaybeRearmReceive()
    {
        if (!_receiveArmed && !_receiveBackingOff && !_receivePaused && !_receiveEnded && !_closing && !_owner.Loop.IsStopping)
        {
            ArmReceive();
        }
    }

    private unsafe void CancelReceive()
    {
        if (_receiveArmed)
        {
            io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindCancel);
            sqe->opcode = IORING_OP_ASYNC_CANCEL;
            sqe->addr = _owner.UserDataOf(KindReceive);
        }
    }

    private unsafe void ArmHangUpPoll()
    {
        io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindHangUpPoll);
        sqe->opcode = IORING_OP_POLL_ADD;
        sqe->fd = _fd;
        sqe->poll32_events = PollRdHup;
    }

    private void OnHangUp(int result)
    {
        if (result <= 0)
        {
            return; // cancelled at close
        }
        _peerHungUp = true;
        if (((uint)result & (PollErr | PollHup)) != 0)
        {
            RestartWaitingReceive(); // a reset or an error; a FIN alone the RECV sees by itself
        }
    }

    // The armed RECV may be waiting for a wakeup that will not come: cancel it; its ECANCELED arms a new one.
    private void RestartWaitingReceive()
    {
        if (_receiveArmed && !_receivePaused && !_receiveEnded && !_closing)
        {
            CancelReceive();
        }
    }

    private void OnReceive(int result, uint flags)
    {
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _receiveArmed = false;
        }
        if (result > 0)
        {
            ushort bid = (ushort)(flags >> IORING_CQE_BUFFER_SHIFT);
            Rings.BufferRing buffers = _owner.Loop.BufferRing;
            try
            {
                if (!_receiveEnded)
                {
                    WriteToInput(buffers.GetBuffer(bid, result));
                }
            }
            finally
            {
                // Whatever the pipe or its memory pool throws (the connection is then aborted), the buffer belongs to
                // the loop's ring: a lost one is lost to every connection of the loop.
                buffers.Recycle(bid);
            }
            _bytesReceived += result;
            if (!_receiveEnded && !_receivePaused)
            {
                FlushInput();
            }
            MaybeRearmReceive();
            if (_peerHungUp && (flags & (IORING_CQE_F_MORE | IORING_CQE_F_SOCK_NONEMPTY)) == IORING_CQE_F_MORE)
            {
                RestartWaitingReceive(); // it emptied the socket and now waits for a wakeup
            }
            return;
        }

        switch (-result)
        {
            case 0:
                // The peer's FIN: the input ends cleanly; sending goes on until the application completes Output.
                RaisePeerClosed(reset: false);
                EndReceive(null);
                break;
            case Errno.ENOBUFS:
                // Every ring buffer was taken. Those given back are published before the next submit, so re-arm at
                // once; but if none came back since this connection's last ENOBUFS, a re-arm would fail again at once
                // (a busy loop): wait a little first.
                _owner.Loop.CountBufferRingExhaustion();
                int mark = _owner.Loop.BufferRing.RecycleMark;
                if (mark == _exhaustionMark)
                {
                    BackOffReceive();
                }
                else
                {
                    _exhaustionMark = mark;
                    MaybeRearmReceive();
                }
                break;
            case Errno.EAGAIN:
            case Errno.EINTR:
                MaybeRearmReceive(); // transient: nothing was received, try again
                break;
            case Errno.ECANCELED:
                MaybeRearmReceive(); // cancelled for backpressure or close; re-arms only if neither holds any more
                break;
            case Errno.ECONNRESET:
                RaisePeerClosed(reset: true);
                BeginClose(_settings.CreateResetException("Connection reset by peer."), abortive: true);
                break;
            default:
                // Abortive, so the peer sees a reset rather than a FIN that would pass for a complete stream.
                BeginClose(new IOException($"Receive failed: {IoUringException.ErrnoName(-result)}.", SocketErrors.FromErrno(-result)), abortive: true);
                break;
        }
    }

    private unsafe void BackOffReceive()
    {
        if (_receiveArmed || _receiveBackingOff || _receivePaused || _receiveEnded || _closing || _owner.Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindReceiveBackoff);
        sqe->opcode = IORING_OP_TIMEOUT;
        sqe->addr = (ulong)s_receiveBackoff;
        sqe->len = 1;
        _receiveBackingOff = true;
    }

    // The backoff TIMEOUT's CQE: it expired, or was cancelled (closing or the loop stopping, which MaybeRearm checks).
    private void OnReceiveBackoffEnded()
    {
        _receiveBackingOff = false;
        MaybeRearmReceive();
    }

    private static unsafe __kernel_timespec* NewTimespec(TimeSpan span)
    {
        var value = (__kernel_timespec*)NativeMemory.AllocZeroed((nuint)sizeof(__kernel_timespec));
        value->tv_nsec = span.Ticks * 100;
        return value;
    }

    private void WriteToInput(ReadOnlySpan<byte> data)
    {
        PipeWriter writer = _input.Writer;
        while (!data.IsEmpty)
        {
            Span<byte> target = writer.GetSpan();
            int count = Math.Min(target.Length, data.Length);
            data[..count].CopyTo(target);
            writer.Advance(count);
            data = data[count..];
        }
        _unflushed = true;
    }

    private void FlushInput()
    {
        _unflushed = false;
        ValueTask<FlushResult> flush = _input.Writer.FlushAsync();
        if (flush.IsCompletedSuccessfully)
        {
            if (flush.Result.IsCompleted)
            {
                OnInputReaderGone();
            }
            return;
        }
        // Backpressure: stop receiving until the reader catches up. Data already on its way still lands in Input.
        _receivePaused = true;
        _pendingFlush = flush;
        RaiseBackpressure(paused: true);
        CancelReceive();
        flush.GetAwaiter().UnsafeOnCompleted(_onFlushCompleted); // runs on the loop (Input's writer scheduler)
    }

    private void OnInputFlushCompleted()
    {
        FlushResult result;
        try
        {
            result = _pendingFlush.GetAwaiter().GetResult();
        }
        catch (Exception)
        {
            result = new FlushResult(isCanceled: false, isCompleted: true);
        }
        _pendingFlush = default;
        _receivePaused = false;
        RaiseBackpressure(paused: false);
        if (result.IsCompleted)
        {
            OnInputReaderGone();
            return;
        }
        if (_unflushed && !_receiveEnded)
        {
            FlushInput();
        }
        MaybeRearmReceive();
    }

    private void OnInputReaderGone()
    {
        // The application will read no more: stop receiving; the connection stays open for sending.
        if (_closing)
        {
            return;
        }
        _receiveEnded = true;
        CancelReceive();
        CheckBothDirectionsEnded();
    }

    private void EndReceive(Exception? error)
    {
        if (_receiveEnded)
        {
            return;
        }
        _receiveEnded = true;
        _input.Writer.Complete(error);
        CheckBothDirectionsEnded();
    }
}
