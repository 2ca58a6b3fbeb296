using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Stopping and restarting: pause and resume, the reader gone, the close, cancels, and the hang-up poll.
internal sealed partial class ConnectionReceiver
{
    /// <summary>Cancels by user_data: a cancel by fd walks every request of the ring. False when the loop had no SQE
    /// for one: call again.</summary>
    public bool CancelForClose()
    {
        bool submitted = Cancel();
        if (_hangUp == HangUpPollState.Armed)
        {
            submitted &= _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.HangUpPoll));
        }
        if (_request == ReceiveRequestState.BackingOff)
        {
            // A TIMEOUT: no fd, but it would hold the close 10 ms.
            submitted &= _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.ReceiveBackoff));
        }
        return submitted;
    }

    public void OnClosing(Exception? reason)
    {
        _ended = true;
        _input.CompleteWriter(reason);
    }

    /// <summary>Input's reader completed while receiving was paused (posted by
    /// <see cref="ConnectionInput.Complete"/>).</summary>
    public void OnInputReaderGone()
    {
        if (_paused)
        {
            _paused = false;
            RaiseBackpressure(paused: false);
        }
        OnReaderGone();
    }

    /// <summary>Posted by the reader: receive again, unless paused since.</summary>
    public void OnInputResumed()
    {
        if (!_paused || _input.WriterPaused)
        {
            return;
        }
        _paused = false;
        RaiseBackpressure(paused: false);
        MaybeRearm();
    }

    /// <summary>Stop receiving; the connection stays open for sending.</summary>
    public void OnReaderGone()
    {
        if (_ended || _connection.IsClosing)
        {
            return; // already ended (FIN, error, or an earlier call): the connection was told then
        }
        _ended = true;
        _connection.OnDirectionEnded(); // closes now if sending ended too, which cancels the receive with the rest
        if (!_connection.IsClosing)
        {
            CancelOrRetry();
        }
    }

    /// <returns>False when the RECV needed a cancel and the loop had no SQE for it.</returns>
    private bool Cancel()
    {
        if (_request != ReceiveRequestState.Armed)
        {
            return true; // nothing to cancel, or its cancel is in flight already
        }
        if (!_connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.Receive, _armedTag)))
        {
            return false;
        }
        _request = ReceiveRequestState.Cancelling;
        return true;
    }

    /// <summary>Without an SQE, again next iteration while still wanted: else a paused connection would go on
    /// receiving, or a reset stay unseen.</summary>
    private void CancelOrRetry()
    {
        if (!Cancel())
        {
            _owner.Loop.Schedule(s_retryCancel, this);
        }
    }

    private static readonly Action<object?> s_retryCancel = static r => ((ConnectionReceiver)r!).RetryCancel();

    private void RetryCancel()
    {
        if (_owner.Loop.IsOnLoopThread && !_connection.IsClosing
            && (_paused || _ended || _hangUp == HangUpPollState.PeerHungUp))
        {
            CancelOrRetry(); // Cancel itself does nothing if the RECV ended or its cancel went meanwhile
        }
    }

    private void RaiseBackpressure(bool paused)
    {
        if (_backpressureCallback is var (callback, state) && callback is not null)
        {
            callback(state, paused);
        }
    }

    private void End(Exception? error)
    {
        if (_ended)
        {
            return;
        }
        _ended = true;
        _input.CompleteWriter(error);
        _connection.OnDirectionEnded();
    }

    // ---- The hang-up poll ----

    public unsafe void ArmHangUpPoll()
    {
        if (_hangUp == HangUpPollState.Armed || _connection.IsClosing || _owner.Loop.IsStopping)
        {
            return; // a retry that came after the close began, or after the stop's cancel-all
        }
        Debug.Assert(_hangUp == HangUpPollState.None, "the hang-up poll armed again after it fired");
        Debug.Assert(_owner.Loop.IsOnLoopThread, "the hang-up poll armed off the loop thread");
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.HangUpPoll);
        if (sqe == null)
        {
            // Again next iteration, so starting a connection cannot throw.
            _owner.Loop.RetryNextIteration(this, static r => r.ArmHangUpPoll());
            return;
        }
        sqe->opcode = IORING_OP_POLL_ADD;
        sqe->fd = _fd;
        sqe->poll32_events = PollRdHup;
        _hangUp = HangUpPollState.Armed;
    }

    public void OnHangUp(int result)
    {
        Debug.Assert(_hangUp == HangUpPollState.Armed, "a hang-up completion without the poll in flight");
        if (result <= 0)
        {
            _hangUp = HangUpPollState.None;
            return; // cancelled at close
        }
        _hangUp = HangUpPollState.PeerHungUp;
        if (((uint)result & (PollErr | PollHup)) != 0)
        {
            RestartWaiting(); // a reset or an error; a FIN alone the RECV sees by itself
        }
    }

    // The armed RECV may be waiting for a wakeup that will not come: cancel it; its ECANCELED arms a new one.
    private void RestartWaiting()
    {
        if (IsReceiving && !_paused && !_ended && !_connection.IsClosing)
        {
            CancelOrRetry();
        }
    }
}
