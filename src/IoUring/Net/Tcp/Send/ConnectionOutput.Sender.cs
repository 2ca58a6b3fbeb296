using System.Diagnostics;
using System.IO.Pipelines;

namespace IoUring.Net;

// The sender's side, on the loop thread: ConnectionSender takes the flushed bytes (TryTake), says what the kernel sent
// (Consume, Unpinned) and ends the output when it is gone (CompleteSender).
internal sealed partial class ConnectionOutput
{
    // ---- Sender side: the loop thread ----

    /// <summary>
    /// What the sender is to do: <see cref="OutputTake.Bytes"/> (<paramref name="bytes"/> to send, which stay in place
    /// until <see cref="Consume"/>), <see cref="OutputTake.Completed"/> (the writer completed and everything is sent;
    /// <paramref name="writerError"/> when it completed with one, unsent bytes or not), or
    /// <see cref="OutputTake.Waiting"/> (nothing yet: the next flush posts
    /// <see cref="ConnectionSender.OnOutputFlushed"/>).
    /// </summary>
    /// <param name="bytes">What to send (with <see cref="OutputTake.Bytes"/>).</param>
    /// <param name="writerError">The writer's error (with <see cref="OutputTake.Completed"/>).</param>
    /// <param name="completion">A cancelled borrowed write's completion (its unsent rest copied here): the sender runs
    /// it once it has submitted <paramref name="bytes"/> (an inline continuation may close the connection).</param>
    public OutputTake TryTake(out SendableBytes bytes, out Exception? writerError, out AwaiterCompletion completion)
    {
        completion = default;
        OutputTake take;
        lock (_sync)
        {
            if (_unborrowRequested)
            {
                completion = Unborrow(); // no send is in flight: nothing reads the caller's memory
            }
            writerError = _writerError;
            if (FileIsNext && writerError is null)
            {
                bytes = default;
                take = OutputTake.File;
            }
            else if (_writerCompleted && (writerError is not null || _committed == _sent))
            {
                bytes = default;
                take = OutputTake.Completed;
            }
            else if (_committed > _sent)
            {
                bytes = new SendableBytes(_head!, _headIndex, SendableEnd - _sent, _borrowing);
                take = OutputTake.Bytes;
            }
            else
            {
                _senderWaiting = true;
                bytes = default;
                take = OutputTake.Waiting;
            }
        }
        return take;
    }

    /// <summary>A borrowed write was cancelled and no send is in flight (the sender asks before it takes
    /// bytes).</summary>
    public bool UnborrowRequested => Volatile.Read(ref _unborrowRequested);

    /// <summary>
    /// Bytes this output holds for the peer, under the lock: unsent, and sent zero-copy but still pinned until the peer
    /// acknowledges them. Flushes wait on both, so a peer that stops reading holds MaxWriteBufferSize whichever way the
    /// bytes went (on copying sends the socket's buffer is the kernel's memory; on zero-copy ones it is ours).
    /// </summary>
    private long Held => _committed - _sent + _pinnedBySender;

    /// <summary>
    /// The kernel sent <paramref name="bytes"/> (of those <see cref="TryTake"/> gave): their blocks go back (once
    /// unpinned); a waiting flush may go on. <paramref name="pinnedUntilNotification"/>: a zero-copy send's, held until
    /// <see cref="Unpinned"/>.
    /// </summary>
    public void Consume(int bytes, bool pinnedUntilNotification = false)
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            Debug.Assert(bytes >= 0 && bytes <= _committed - _sent);
            _sent += bytes;
            if (pinnedUntilNotification)
            {
                _pinnedBySender += bytes;
            }
            ReleaseSent();
            completion = ResumeIfCaughtUp();
        }
        completion.Run();
    }

    /// <summary>A zero-copy send's notification came: the <paramref name="bytes"/> it had sent no longer hold
    /// memory.</summary>
    public void Unpinned(int bytes)
    {
        AwaiterCompletion completion;
        lock (_sync)
        {
            _pinnedBySender -= bytes;
            Debug.Assert(_pinnedBySender >= 0);
            completion = ResumeIfCaughtUp();
        }
        completion.Run();
    }

    /// <summary>Under the lock: completes a waiting flush once a borrowed write is all sent, or the bytes held fell
    /// below the resume threshold.</summary>
    private AwaiterCompletion ResumeIfCaughtUp()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (_flush.IsWaiting && !_senderCompleted && (_borrowing ? _sent >= _borrowedEnd : Held < _resumeThreshold))
        {
            EndBorrowing(); // its segments went back with ReleaseSent: all of it is sent
            return _flush.Complete(new FlushResult(isCanceled: false, isCompleted: false), null, _inlineContinuations);
        }
        return default;
    }

    /// <summary>
    /// The sender is gone (closing, the peer gone, a send error): unsent bytes are dropped and flushes return
    /// IsCompleted from now on, or throw <paramref name="error"/>.
    /// </summary>
    public void CompleteSender(Exception? error)
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            if (_senderCompleted)
            {
                return;
            }
            _senderCompleted = true;
            _senderError = error;
            _senderWaiting = false;
            _sent = _committed;
            ReleaseSent(); // borrowed segments too: no send is in flight once the sender is gone
            EndBorrowing();
            if (_flush.IsWaiting)
            {
                completion = _flush.Complete(new FlushResult(isCanceled: false, isCompleted: error is null), error,
                    _inlineContinuations);
            }
        }
        completion.Run();
    }
}
