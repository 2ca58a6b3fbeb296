using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.ExceptionServices;
using System.Threading.Tasks.Sources;

namespace IoUring.Net;

// Reader side: the application. The PipeReader contract (reads, AdvanceTo, cancelling, completing the reader), and
// the completion of a waiting read, shared with the writer side.
internal sealed partial class ConnectionInput
{
    public override ValueTask<ReadResult> ReadAsync(CancellationToken cancellationToken = default)
        => Read(0, cancellationToken);

    protected override ValueTask<ReadResult> ReadAtLeastAsyncCore(int minimumSize, CancellationToken cancellationToken)
        => Read(minimumSize, cancellationToken);

    private ValueTask<ReadResult> Read(int minimumSize, CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            return ValueTask.FromCanceled<ReadResult>(cancellationToken);
        }
        bool resume = false;
        short version;
        lock (_sync)
        {
            ThrowIfCannotRead();
            if (_cancelNextRead)
            {
                _cancelNextRead = false;
                TakeResult(out ReadResult canceled, canceled: true);
                return new ValueTask<ReadResult>(canceled);
            }
            if (_writerCompleted && _writerError is { } error)
            {
                _readState = InputReadState.None; // a new read: the last result's buffer is no longer the reader's
                DropUnreadable();
                return ValueTask.FromException<ReadResult>(error);
            }
            if (CanCompleteRead(minimumSize))
            {
                TakeResult(out ReadResult ready, canceled: false);
                return new ValueTask<ReadResult>(ready);
            }
            _pendingMinimum = minimumSize;
            version = _read.Begin(cancellationToken);
            if (_writerPaused && minimumSize > _written - _consumed)
            {
                _writerPaused = false; // it wants more than the threshold let in: receive until it has it
                resume = true;
            }
        }
        if (resume)
        {
            _loop.Schedule(s_onResumed, _receiver);
        }
        if (cancellationToken.CanBeCanceled)
        {
            _read.RegisterToken(_sync, version, cancellationToken, s_onReadCancelled, this);
        }
        return new ValueTask<ReadResult>(this, version);
    }

    public override bool TryRead(out ReadResult result)
    {
        lock (_sync)
        {
            ThrowIfCannotRead();
            if (_cancelNextRead)
            {
                _cancelNextRead = false;
                TakeResult(out result, canceled: true);
                return true;
            }
            if (_writerCompleted && _writerError is { } error)
            {
                _readState = InputReadState.None; // as in ReadAsync
                DropUnreadable();
                ExceptionDispatchInfo.Throw(error);
            }
            if (_written > _consumed || _writerCompleted)
            {
                TakeResult(out result, canceled: false);
                return true;
            }
            _readState = InputReadState.Tentative; // as a pipe's: AdvanceTo may follow, need not
        }
        result = default;
        return false;
    }

    public override void AdvanceTo(SequencePosition consumed) => AdvanceTo(consumed, consumed);

    public override void AdvanceTo(SequencePosition consumed, SequencePosition examined)
    {
        bool resume = false;
        lock (_sync)
        {
            if (_readerCompleted)
            {
                throw new InvalidOperationException("Reading is not allowed after the reader was completed.");
            }
            if (_readState == InputReadState.None)
            {
                throw new InvalidOperationException("No read to advance: AdvanceTo must follow a read's result.");
            }
            long consumedAt = IndexOf(consumed);
            long examinedAt = IndexOf(examined);
            if (consumedAt < _consumed || consumedAt > _written || examinedAt < consumedAt || examinedAt > _written)
            {
                throw new InvalidOperationException(
                    "The positions passed to AdvanceTo are not of the last read's buffer, or examined is before " +
                    "consumed.");
            }
            _readState = InputReadState.None;
            _examined = examinedAt;
            _consumed = consumedAt;
            ReleaseConsumed();
            DropUnreadable();
            if (_writerPaused && _written - _consumed < _resumeThreshold)
            {
                _writerPaused = false;
                resume = true;
            }
        }
        if (resume)
        {
            _loop.Schedule(s_onResumed, _receiver);
        }
    }

    public override void CancelPendingRead()
    {
        AwaiterCompletion completion;
        lock (_sync)
        {
            if (!_read.IsWaiting)
            {
                _cancelNextRead = true;
                return;
            }
            completion = CompletePendingRead(canceled: true, error: null);
        }
        completion.Run();
    }

    public override void Complete(Exception? exception = null)
    {
        bool wasPaused;
        lock (_sync)
        {
            if (_readerCompleted)
            {
                return;
            }
            _readerCompleted = true;
            _readState = InputReadState.None;
            wasPaused = _writerPaused;
            _writerPaused = false;
            if (!_lent)
            {
                _consumed = _written;
                ReleaseConsumed();
            } // else an Output may be sending from the blocks: they go back when the copy ends (EndLending)
        }
        if (wasPaused)
        {
            _loop.Schedule(s_onReaderGone, _receiver); // a paused receiver would not notice by itself
        }
    }

    private void OnReadCancelled(CancellationToken token)
    {
        AwaiterCompletion completion;
        lock (_sync)
        {
            if (!_read.IsWaiting || _read.Token != token)
            {
                return;
            }
            completion = CompletePendingRead(canceled: false, new OperationCanceledException(token));
            completion.Registration = default; // this is its callback: nothing to unregister
        }
        completion.Run();
    }

    // ---- Shared with the writer side, under _sync ----

    private bool CanCompleteRead(int minimumSize)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        return _writerCompleted || (minimumSize > 0 ? _written - _consumed >= minimumSize : _written > _examined);
    }

    /// <summary>Sets the waiting read's outcome (the bytes held, or <paramref name="error"/>) under the lock, so it
    /// cannot race the next read's start; the returned completion runs the continuation after the lock.</summary>
    private AwaiterCompletion CompletePendingRead(bool canceled, Exception? error)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        _pendingMinimum = 0;
        ReadResult result = default;
        if (error is null)
        {
            TakeResult(out result, canceled);
        }
        else
        {
            _readState = InputReadState.None; // the read failed: the reader holds no buffer
        }
        return _read.Complete(result, error, _inlineContinuations);
    }

    /// <summary>Makes a result of the bytes held now; the reader then owes an AdvanceTo (optional after a canceled
    /// one).</summary>
    private void TakeResult(out ReadResult result, bool canceled)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        ReadOnlySequence<byte> buffer = _head is null
            ? default
            : new ReadOnlySequence<byte>(_head, _headIndex, _tail!, _tail!.End);
        result = new ReadResult(buffer, canceled, isCompleted: _writerCompleted);
        _readState = canceled ? InputReadState.Tentative : InputReadState.Reading;
    }

    private void ThrowIfCannotRead()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (_readerCompleted)
        {
            throw new InvalidOperationException("Reading is not allowed after the reader was completed.");
        }
        if (_read.IsWaiting || _readState == InputReadState.Reading)
        {
            throw new InvalidOperationException(
                "Reading is already in progress: a read must be followed by AdvanceTo before the next.");
        }
    }

    private long IndexOf(SequencePosition position)
    {
        // A default position is the start of an empty buffer: nothing was held when the read returned.
        return position.GetObject() is InputSegment segment ? segment.RunningIndex + position.GetInteger() : _consumed;
    }

    ReadResult IValueTaskSource<ReadResult>.GetResult(short token)
    {
        lock (_sync)
        {
            return _read.GetResult(token);
        }
    }

    ValueTaskSourceStatus IValueTaskSource<ReadResult>.GetStatus(short token)
    {
        lock (_sync)
        {
            return _read.GetStatus(token);
        }
    }

    void IValueTaskSource<ReadResult>.OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _read.OnCompleted(_sync, continuation, state, token, flags, _inlineContinuations);
}
