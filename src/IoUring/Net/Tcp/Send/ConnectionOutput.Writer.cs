using System.Diagnostics;
using System.IO.Pipelines;

namespace IoUring.Net;

// The PipeWriter contract, on the application's threads: memory to write in, Advance, FlushAsync (which commits the
// written bytes to the sender and waits while too many are held), CancelPendingFlush and Complete.
internal sealed partial class ConnectionOutput
{
    // ---- Writer side: the application ----

    public override bool CanGetUnflushedBytes => true;

    public override long UnflushedBytes => _unflushed;

    public override Memory<byte> GetMemory(int sizeHint = 0)
    {
        ArgumentOutOfRangeException.ThrowIfNegative(sizeHint);
        // _writing is only ever cleared by this writer (a commit): while set, _writable stays this writer's.
        if (!_writing || _writable.Length < Math.Max(sizeHint, 1))
        {
            StartWriting(sizeHint);
        }
        return _writable;
    }

    public override Span<byte> GetSpan(int sizeHint = 0) => GetMemory(sizeHint).Span;

    public override void Advance(int bytes)
    {
        if (!_writing)
        {
            if (bytes == 0)
            {
                return;
            }
            throw new InvalidOperationException(
                "Advance without memory from GetMemory or GetSpan since the last flush.");
        }
        if ((uint)bytes > (uint)_writable.Length)
        {
            throw new ArgumentOutOfRangeException(nameof(bytes), bytes,
                "More bytes than the memory GetMemory returned.");
        }
        if (Volatile.Read(ref _senderCompleted))
        {
            return; // as a pipe's: nothing will be sent, so the same memory is written again (no new blocks)
        }
        _tail!.Written += bytes;
        _writable = _writable.Slice(bytes);
        _unflushed += bytes;
    }

    public override ValueTask<FlushResult> FlushAsync(CancellationToken cancellationToken = default)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            return ValueTask.FromCanceled<FlushResult>(cancellationToken);
        }
        Action<object?>? postSender = null;
        ValueTask<FlushResult> result;
        bool register = false;
        short version = 0;
        lock (_sync)
        {
            if (_writerCompleted)
            {
                // As a pipe's: no error (a stream's flush racing its dispose), nothing left to commit.
                result = new ValueTask<FlushResult>(new FlushResult(isCanceled: false, isCompleted: _senderCompleted));
            }
            else
            {
                Commit();
                if (_senderCompleted)
                {
                    result = _senderError is { } error ? ValueTask.FromException<FlushResult>(error)
                        : new ValueTask<FlushResult>(new FlushResult(isCanceled: false, isCompleted: true));
                }
                else
                {
                    if (TakeSenderWaiting())
                    {
                        postSender = SendFromCaller();
                    }
                    if (_flush.IsWaiting)
                    {
                        // A flush already waits (its caller did not await it): this one joins it, as with a pipe,
                        // and its token may cancel the wait too.
                        version = _flush.Join(cancellationToken, out register);
                        result = new ValueTask<FlushResult>(this, version);
                    }
                    else if (_cancelNextFlush)
                    {
                        _cancelNextFlush = false;
                        result = new ValueTask<FlushResult>(new FlushResult(isCanceled: true, isCompleted: false));
                    }
                    else if (_pauseThreshold == 0 || Held < _pauseThreshold)
                    {
                        result = default; // not canceled, not completed
                    }
                    else
                    {
                        version = _flush.Begin(cancellationToken);
                        register = cancellationToken.CanBeCanceled;
                        result = new ValueTask<FlushResult>(this, version);
                    }
                }
            }
        }
        if (postSender is not null)
        {
            _loop.Schedule(postSender, _sender); // outside the lock: it may write the loop's eventfd
        }
        if (register)
        {
            _flush.RegisterToken(_sync, version, cancellationToken, s_onFlushCancelled, this);
        }
        return result;
    }

    public override void CancelPendingFlush()
    {
        AwaiterCompletion completion = default;
        bool postUnborrow = false;
        lock (_sync)
        {
            if (!_flush.IsWaiting)
            {
                _cancelNextFlush = true;
                return;
            }
            if (_borrowing)
            {
                postUnborrow = RequestUnborrow(null);
            }
            else
            {
                completion = _flush.Complete(new FlushResult(isCanceled: true, isCompleted: false), null,
                    _inlineContinuations);
            }
        }
        PostUnborrow(postUnborrow);
        completion.Run();
    }

    /// <summary>
    /// No more writes: what was written is sent (committed as by a flush), then FIN; with <paramref name="exception"/>
    /// the connection fails instead (abortive close: the peer must not take the stream for complete).
    /// </summary>
    public override void Complete(Exception? exception = null)
    {
        bool postSender;
        lock (_sync)
        {
            if (_writerCompleted)
            {
                return;
            }
            Commit();
            _writerCompleted = true;
            _writerError = exception;
            postSender = _senderWaiting; // the sender learns of the end even with nothing left to send
            _senderWaiting = false;
        }
        if (postSender)
        {
            _loop.Schedule(s_onFlushed, _sender);
        }
    }

    /// <summary>Takes the lock: a block with room for <paramref name="sizeHint"/> bytes (at least one) becomes
    /// _writable.</summary>
    private void StartWriting(int sizeHint)
    {
        int needed = Math.Max(sizeHint, 1);
        lock (_sync)
        {
            if (_writerCompleted)
            {
                throw new InvalidOperationException("Writing is not allowed after the writer was completed.");
            }
            OutputSegment? tail = _tail;
            if (tail is null || tail.Memory.Length - tail.Written < needed)
            {
                OutputSegment segment = _segments.Rent();
                int size = Math.Max(needed, _minimumSegment);
                bool large = size > _pool.MaxBufferSize && size <= Loops.EventLoop.LargeBlockSize;
                segment.Rent(_pool, size, runningIndex: tail is null ? _committed : tail.RunningIndex + tail.Written,
                    largePool: large ? _loop.LargeBlockPool : null);
                if (tail is null)
                {
                    _head = segment;
                    _headIndex = 0;
                }
                else
                {
                    tail.Next = segment;
                }
                _tail = tail = segment;
            }
            _writing = true; // before any release: the block written in now stays
            _writable = tail.Memory.Slice(tail.Written);
            ReleaseSent(); // the block the writer moved on from may be sent already
        }
    }

    /// <summary>Under the lock, by the writer: what it advanced becomes the sender's to send (or is dropped once the
    /// sender is gone).</summary>
    private void Commit()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        for (OutputSegment? segment = _commitFrom ?? _head; segment is not null; segment = segment.Next)
        {
            segment.Committed = segment.Written;
        }
        _commitFrom = _tail;
        _committed += _unflushed;
        _unflushed = 0;
        _writing = false;
        _writable = default;
        if (_senderCompleted)
        {
            _sent = _committed; // dropped: nothing will send them
        }
        ReleaseSent(); // a block asked for and not written in (or already sent) is not held
    }

    private bool TakeSenderWaiting()
    {
        if (_senderWaiting && _committed > _sent)
        {
            _senderWaiting = false;
            return true;
        }
        return false;
    }
}
