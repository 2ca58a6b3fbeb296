using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Completion handling: a RECV's or vectored RECVMSG's bytes go to Input, then the next receive is armed; a completion
// without bytes is the peer's FIN, an error, or an end that re-arms (ENOBUFS, EAGAIN, ECANCELED).
internal sealed partial class ConnectionReceiver
{
    public void OnReceive(ReceivedBytes data, uint flags)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
            _cancelling = false;
        }
        // Single-shot, with bytes still in the socket: the next RECV (armed below) completes at once with more, so the
        // reader need not wake for these alone (the batch a multishot RECV delivers in one iteration).
        bool moreFollows = _singleShot && (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        OnBytes(_ended ? ConnectionInput.InputWrite.Accepted : _input.Write(data, moreFollows), data.Length, flags,
            moreFollows);
    }

    /// <summary>The vectored RECVMSG's completion (see <see cref="TryArmVectored"/>): its bytes are in its spare
    /// blocks.</summary>
    public void OnVectoredReceive(int result, uint flags)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        _armed = false;
        _cancelling = false;
        int count = _vectorCount;
        _vectorCount = 0;
        if (result <= 0)
        {
            ReturnVectorBlocks(count);
            OnReceiveEnded(result, flags);
            return;
        }
        bool moreFollows = (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        // WriteBlocks takes or returns every block (dropping the bytes once the reader is gone).
        ConnectionInput.InputWrite written = _input.WriteBlocks(_vectorBlocks.AsSpan(0, count),
            _vectorLengths.AsSpan(0, count), _ended ? 0 : result, moreFollows);
        _vectorBlocks.AsSpan(0, count).Clear();
        OnBytes(_ended ? ConnectionInput.InputWrite.Accepted : written, result, flags, moreFollows);
    }

    // After a receive's bytes went to Input (single-shot: moreFollows when the socket still holds some).
    private void OnBytes(ConnectionInput.InputWrite written, int length, uint flags, bool moreFollows)
    {
        _socketNonEmpty = moreFollows;
        if (!_ended)
        {
            switch (written)
            {
                case ConnectionInput.InputWrite.Paused when !_paused:
                    // Backpressure: stop receiving until the reader catches up. Data already on its way still lands in
                    // Input.
                    _paused = true;
                    RaiseBackpressure(paused: true);
                    CancelOrRetry();
                    break;
                case ConnectionInput.InputWrite.ReaderGone:
                    OnReaderGone();
                    break;
            }
        }
        _bytesReceived += length;
        _owner.Loop.OnBytesReceived(length);
        MaybeRearm();
        if (moreFollows && !_armed)
        {
            // no RECV follows at once (paused, ended, closing, or no SQE): what Input holds is all for now
            _input.WakeReader();
        }
        if (_peerHungUp && (flags & (IORING_CQE_F_MORE | IORING_CQE_F_SOCK_NONEMPTY)) == IORING_CQE_F_MORE)
        {
            RestartWaiting(); // it emptied the socket and now waits for a wakeup
        }
    }

    /// <summary>A RECV completion without bytes: the peer's FIN, or an error.</summary>
    public void OnReceiveEnded(int result, uint flags)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
            _cancelling = false;
        }
        if (_singleShot)
        {
            _socketNonEmpty = false;
            _input.WakeReader(); // the RECV the last bytes were held for brought none (ENOBUFS, cancelled, an error)
        }
        switch (-result)
        {
            case 0:
                // The peer's FIN: the input ends cleanly; sending goes on until the application completes Output.
                _connection.NotifyPeerClosed(reset: false);
                End(null);
                break;
            case Errno.ENOBUFS:
                // Every ring buffer was taken. Those given back are published before the next submit, so re-arm at
                // once; but if none came back since this connection's last ENOBUFS, a re-arm would fail again at once
                // (a busy loop): wait a little first.
                if (_owner.Loop.ReceiveBuffers.OnExhausted(ref _exhaustionMark))
                {
                    MaybeRearm();
                }
                else
                {
                    BackOff();
                }
                break;
            case Errno.EAGAIN:
            case Errno.EINTR:
                MaybeRearm(); // transient: nothing was received, try again
                break;
            case Errno.ECANCELED:
                MaybeRearm(); // cancelled for backpressure or close; re-arms only if neither holds any more
                break;
            case Errno.ECONNRESET:
                _connection.NotifyPeerClosed(reset: true);
                _connection.Fail(_connection.Settings.CreateResetException("Connection reset by peer."));
                break;
            default:
                // Abortive, so the peer sees a reset rather than a FIN that would pass for a complete stream.
                _connection.Fail(new IOException($"Receive failed: {IoUringException.ErrnoName(-result)}.",
                    SocketErrors.FromErrno(-result)));
                break;
        }
    }
}
