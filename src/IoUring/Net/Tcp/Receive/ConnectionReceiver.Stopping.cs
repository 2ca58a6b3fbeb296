namespace IoUring.Net;

// Stopping receiving: a pause for Input's backpressure and its resumption, the reader gone, the peer's FIN or an
// error, the close; and the cancels of the RECV these need (retried while the loop has no SQE).
internal sealed partial class ConnectionReceiver
{
    /// <summary>
    /// Closing: cancels each of this side's requests in flight by its user_data (a cancel by fd would make the kernel
    /// walk every pending request of the ring: a cost that grows with the loop's open connections).
    /// </summary>
    /// <returns>False when the loop had no SQE for one of them: call again.</returns>
    public bool CancelForClose()
    {
        bool submitted = Cancel();
        if (_hangUpArmed)
        {
            submitted &= _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.HangUpPoll));
        }
        if (_backingOff)
        {
            // A TIMEOUT: no fd, but it would hold the close 10 ms.
            submitted &= _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.ReceiveBackoff));
        }
        return submitted;
    }

    /// <summary>The connection is closing (its requests are being cancelled): Input ends with
    /// <paramref name="reason"/>.</summary>
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

    /// <summary>Input's backlog fell below its resume threshold (posted by the reader): receive again, unless it paused
    /// since.</summary>
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

    /// <summary>The application will read no more: stop receiving; the connection stays open for sending.</summary>
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
        if (_armed && !_cancelling)
        {
            _cancelling = _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.Receive, _armedTag));
            return _cancelling;
        }
        return true;
    }

    /// <summary>
    /// Cancels the RECV for a pause, the reader gone or a restart; if the loop has no SQE for it (the SQ still full
    /// after an early submit), tries again next iteration for as long as the cancel is still wanted: without it a
    /// paused connection would go on receiving where the kernel cannot cap the RECV, or a reset stay unseen.
    /// </summary>
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
        if (_owner.Loop.IsOnLoopThread && !_connection.IsClosing && (_paused || _ended || _peerHungUp))
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
}
