using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Threading.Tasks.Sources;

namespace IoUring.Net;

// A flush that waits for the sender: its cancel, its IValueTaskSource, and borrowed writes (a large WriteAsync sent
// from the caller's memory until the flush completes; cancelled, its unsent rest is copied into the output's blocks).
internal sealed partial class ConnectionOutput
{
    public override void CancelPendingFlush()
    {
        AwaiterCompletion completion = default;
        bool postCancel = false;
        lock (_sync)
        {
            if (!_flush.IsWaiting)
            {
                _cancelNextFlush = true;
                return;
            }
            if (_borrowedWritePending)
            {
                postCancel = CancelBorrowedWriteUnsynchronized(null);
            }
            else
            {
                completion = _flush.Complete(new FlushResult(isCanceled: true, isCompleted: false), null,
                    _inlineContinuations);
            }
        }
        PostBorrowedWriteCancel(postCancel);
        completion.Run();
    }

    private void OnFlushCancelled(CancellationToken token)
    {
        AwaiterCompletion completion = default;
        bool postCancel = false;
        lock (_sync)
        {
            if (!_flush.IsWaiting || !_flush.Cancels(token))
            {
                return;
            }
            if (_borrowedWritePending)
            {
                postCancel = CancelBorrowedWriteUnsynchronized(new OperationCanceledException(token));
            }
            else
            {
                completion = _flush.Complete(default, new OperationCanceledException(token), _inlineContinuations);
                completion.Registration = default; // this is its callback: nothing to unregister
            }
        }
        PostBorrowedWriteCancel(postCancel);
        completion.Run();
    }

    FlushResult IValueTaskSource<FlushResult>.GetResult(short token)
    {
        lock (_sync)
        {
            return _flush.GetResult(token);
        }
    }

    ValueTaskSourceStatus IValueTaskSource<FlushResult>.GetStatus(short token)
    {
        lock (_sync)
        {
            return _flush.GetStatus(token);
        }
    }

    void IValueTaskSource<FlushResult>.OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _flush.OnCompleted(_sync, continuation, state, token, flags, _inlineContinuations);

    /// <summary>
    /// A write of at least the pause threshold (and at least <see cref="MinimumBorrowedWrite"/>) is not copied: the
    /// flush completes once the kernel has taken all of it (as <c>Socket.SendAsync</c>). Cancelled, it completes once
    /// no send reads that memory, the unsent rest copied: nothing is lost.
    /// </summary>
    public override ValueTask<FlushResult> WriteAsync(ReadOnlyMemory<byte> source,
        CancellationToken cancellationToken = default)
    {
        if (source.Length < _borrowedWriteThreshold || cancellationToken.IsCancellationRequested)
        {
            return base.WriteAsync(source, cancellationToken); // copied, then flushed
        }
        return TryWriteBorrowed(new ReadOnlySequence<byte>(source), cancellationToken)
            ?? base.WriteAsync(source, cancellationToken);
    }

    /// <summary>As <see cref="WriteAsync(ReadOnlyMemory{byte}, CancellationToken)"/> for a sequence
    /// (<see cref="ConnectionInput"/>'s CopyToAsync).</summary>
    public ValueTask<FlushResult> WriteAsync(in ReadOnlySequence<byte> source, CancellationToken cancellationToken)
    {
        if (source.Length >= _borrowedWriteThreshold && !cancellationToken.IsCancellationRequested
            && TryWriteBorrowed(source, cancellationToken) is { } borrowed)
        {
            return borrowed;
        }
        foreach (ReadOnlyMemory<byte> segment in source)
        {
            this.Write(segment.Span);
        }
        return FlushAsync(cancellationToken);
    }

    /// <summary>Links <paramref name="source"/>'s memory after what was written; null where a plain flush would not
    /// wait (the caller copies instead).</summary>
    private ValueTask<FlushResult>? TryWriteBorrowed(in ReadOnlySequence<byte> source,
        CancellationToken cancellationToken)
    {
        // The segments first, outside the lock: if enumerating the sequence throws, nothing was linked.
        OutputSegment? first = null;
        OutputSegment? last = null;
        foreach (ReadOnlyMemory<byte> piece in source)
        {
            if (piece.IsEmpty)
            {
                continue;
            }
            OutputSegment segment = _segments.Rent();
            segment.Borrow(piece);
            if (last is null)
            {
                first = segment;
            }
            else
            {
                last.Next = segment;
            }
            last = segment;
        }
        Action<object?>? postSender = null;
        short version;
        lock (_sync)
        {
            if (first is null || _writerCompleted || _senderCompleted || _flush.IsWaiting || _cancelNextFlush)
            {
                ReturnSegments(first, end: null);
                return null;
            }
            Debug.Assert(!_borrowedWritePending, "a borrowed write without its flush waiting");
            CommitUnsynchronized(); // what was written before goes first
            if (_tail is null)
            {
                _head = first;
                _headIndex = 0;
            }
            else
            {
                _tail.Next = first;
            }
            for (OutputSegment? segment = first; segment is not null; segment = segment.Next)
            {
                segment.SetRunningIndex(_committed);
                _committed += segment.Committed;
            }
            _tail = last;         // full: the writer's next GetMemory starts a block of its own after it
            _commitFrom = last;
            _borrowedWritePending = true;
            _borrowedWriteEnd = _committed;
            if (TakeSenderWaitingUnsynchronized())
            {
                postSender = SendFromCallerUnsynchronized();
            }
            if (_sent >= _borrowedWriteEnd)
            {
                // This thread sent all of it: the segments went back, nothing reads the caller's memory.
                EndBorrowedWriteUnsynchronized();
                return new ValueTask<FlushResult>(new FlushResult(isCanceled: false, isCompleted: false));
            }
            version = _flush.Begin(cancellationToken);
        }
        if (postSender is not null)
        {
            _loop.Schedule(postSender, _sender); // outside the lock: it may write the loop's eventfd
        }
        if (cancellationToken.CanBeCanceled)
        {
            _flush.RegisterToken(_sync, version, cancellationToken, s_onFlushCancelled, this);
        }
        return new ValueTask<FlushResult>(this, version);
    }

    /// <summary>
    /// The kernel may be reading the caller's memory: the sender cancels its send
    /// (<see cref="ConnectionSender.OnBorrowedWriteCancelled"/>), then <see cref="TakeWork"/> copies the rest and
    /// completes the write with <paramref name="error"/> (null: IsCanceled).
    /// </summary>
    /// <returns>True when the sender is to be told, outside the lock.</returns>
    private bool CancelBorrowedWriteUnsynchronized(Exception? error)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a borrowed write cancelled without the lock");
        Debug.Assert(_borrowedWritePending, "no borrowed write to cancel");
        if (_borrowedWriteCancelled)
        {
            return false;
        }
        _borrowedWriteCancelled = true;
        _borrowedWriteCancelError = error;
        return true;
    }

    private void PostBorrowedWriteCancel(bool post)
    {
        if (post)
        {
            _loop.Schedule(s_onBorrowedWriteCancelled, _sender); // outside the lock: it may write the loop's eventfd
        }
    }

    /// <summary>No send in flight: the unsent borrowed bytes are copied into blocks that take the borrowed segments'
    /// place.</summary>
    private AwaiterCompletion CopyBorrowedRestUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a borrowed write copied without the lock");
        Debug.Assert(_loop.IsOnLoopThread, "a borrowed write is copied by the sender, between its sends");
        _borrowedWriteCancelled = false;
        Exception? error = _borrowedWriteCancelError;
        _borrowedWriteCancelError = null;
        if (!_borrowedWritePending)
        {
            return default; // it completed (all sent) or the sender is gone
        }
        // The borrowed write's segments follow each other at the end of the chain (the writer waits; anything it
        // wrote meanwhile comes after them).
        OutputSegment? previous = null;
        OutputSegment first = _head!;
        while (!first.IsBorrowed)
        {
            previous = first;
            first = first.Next!;
        }
        OutputSegment? after = first;
        while (after is { IsBorrowed: true })
        {
            after = after.Next;
        }
        OutputSegment? copies = null;
        OutputSegment? last = null;
        int from = previous is null ? _headIndex : 0;
        long start = first.RunningIndex + from; // the stream offset of the first unsent borrowed byte
        OutputSegment? block = null;
        for (OutputSegment? borrowed = first; borrowed != after; borrowed = borrowed.Next)
        {
            ReadOnlySpan<byte> rest = borrowed!.Memory.Span.Slice(from, borrowed.Committed - from);
            from = 0;
            while (!rest.IsEmpty)
            {
                if (block is null || block.Written == block.Memory.Length)
                {
                    block = _segments.Rent();
                    long runningIndex = last is null ? start : last.RunningIndex + last.Written;
                    block.Rent(_pool, Math.Max(_minimumSegment,
                        Math.Min(_pool.MaxBufferSize, (int)Math.Min(int.MaxValue, _borrowedWriteEnd - runningIndex))),
                        runningIndex);
                    if (last is null)
                    {
                        copies = block;
                    }
                    else
                    {
                        last.Next = block;
                    }
                    last = block;
                }
                int count = Math.Min(rest.Length, block.Memory.Length - block.Written);
                rest[..count].CopyTo(block.Memory.Span[block.Written..]);
                block.Written += count;
                block.Committed = block.Written;
                rest = rest[count..];
            }
        }
        Debug.Assert(last is not null, "a pending borrowed write has unsent bytes, so at least one copy");
        last.Next = after;
        if (previous is null)
        {
            _head = copies;
            _headIndex = 0;
        }
        else
        {
            previous.Next = copies;
        }
        if (after is null)
        {
            _tail = last;
        }
        if (_commitFrom is { IsBorrowed: true })
        {
            _commitFrom = last;
        }
        ReturnSegments(first, end: after);
        _borrowedWritePending = false;
        return _flush.Complete(new FlushResult(isCanceled: error is null, isCompleted: false), error,
            _inlineContinuations);
    }

    /// <summary>All of it sent, or the sender gone: a cancel that came too late is dropped.</summary>
    private void EndBorrowedWriteUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a borrowed write ended without the lock");
        _borrowedWritePending = false;
        _borrowedWriteCancelled = false;
        _borrowedWriteCancelError = null;
    }
}
