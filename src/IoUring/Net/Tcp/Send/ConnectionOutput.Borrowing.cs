using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;

namespace IoUring.Net;

// Borrowed writes: a WriteAsync at least as large as the borrow threshold is sent from the caller's memory, not
// copied; cancelled, its unsent rest is copied into the output's own blocks on the loop thread (Unborrow).
internal sealed partial class ConnectionOutput
{
    /// <summary>
    /// Writes <paramref name="source"/> and flushes. A write of at least the borrow threshold (the pause threshold, at
    /// least <see cref="MinimumBorrow"/>) is not copied: the sender sends it from <paramref name="source"/> itself, and
    /// the returned flush completes only once the kernel has taken all of it (as <c>Socket.SendAsync</c> does), so the
    /// caller may reuse its memory then and not before. Cancelled (its token, or <see cref="CancelPendingFlush"/>), it
    /// completes once no send reads that memory any more, with the bytes not yet sent copied into the output's own
    /// blocks: nothing is lost, they go out after what was sent.
    /// </summary>
    public override ValueTask<FlushResult> WriteAsync(ReadOnlyMemory<byte> source,
        CancellationToken cancellationToken = default)
    {
        if (source.Length < _borrowThreshold || cancellationToken.IsCancellationRequested)
        {
            return base.WriteAsync(source, cancellationToken); // copied, then flushed
        }
        return TryBorrow(new ReadOnlySequence<byte>(source), cancellationToken)
            ?? base.WriteAsync(source, cancellationToken);
    }

    /// <summary>
    /// As <see cref="WriteAsync(ReadOnlyMemory{byte}, CancellationToken)"/> for a sequence
    /// (<see cref="ConnectionInput"/>'s CopyToAsync: received blocks sent as they are): the caller keeps
    /// <paramref name="source"/>'s memory unchanged until the flush completes.
    /// </summary>
    public ValueTask<FlushResult> WriteAsync(in ReadOnlySequence<byte> source, CancellationToken cancellationToken)
    {
        if (source.Length >= _borrowThreshold && !cancellationToken.IsCancellationRequested
            && TryBorrow(source, cancellationToken) is { } borrowed)
        {
            return borrowed;
        }
        foreach (ReadOnlyMemory<byte> segment in source)
        {
            this.Write(segment.Span);
        }
        return FlushAsync(cancellationToken);
    }

    /// <summary>
    /// Links <paramref name="source"/>'s memory after what was written (one borrowed segment per piece) and returns the
    /// flush that completes once all of it is sent; null where a plain flush answers without waiting (completed, a
    /// flush already waiting, a cancel for the next flush): the caller copies instead.
    /// </summary>
    private ValueTask<FlushResult>? TryBorrow(in ReadOnlySequence<byte> source, CancellationToken cancellationToken)
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
            Commit(); // what was written before goes first
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
            _borrowing = true;
            _borrowedEnd = _committed;
            if (TakeSenderWaiting())
            {
                postSender = SendFromCaller();
            }
            if (_sent >= _borrowedEnd)
            {
                // This thread sent all of it (as Socket.SendAsync completes a send the socket took at once): its
                // segments went back with the send, so nothing reads the caller's memory any more.
                EndBorrowing();
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
    /// Under the lock: the waiting borrowed write was cancelled. The kernel may be reading the caller's memory, so the
    /// sender ends that (<see cref="ConnectionSender.OnUnborrowRequested"/>) and the next <see cref="TryTake"/> copies
    /// what is left and completes the write with <paramref name="error"/> (null: IsCanceled).
    /// </summary>
    /// <returns>True when the sender is to be told (<see cref="PostUnborrow"/>, outside the lock).</returns>
    private bool RequestUnborrow(Exception? error)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (_unborrowRequested)
        {
            return false;
        }
        _unborrowRequested = true;
        _unborrowError = error;
        return true;
    }

    private void PostUnborrow(bool post)
    {
        if (post)
        {
            _loop.Schedule(s_onUnborrowRequested, _sender); // outside the lock: it may write the loop's eventfd
        }
    }

    /// <summary>
    /// Under the lock, on the loop thread with no send in flight: the cancelled borrowed write's unsent bytes are
    /// copied into blocks of the output's own, which take its segment's place, and the write completes as cancelled.
    /// </summary>
    private AwaiterCompletion Unborrow()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        _unborrowRequested = false;
        Exception? error = _unborrowError;
        _unborrowError = null;
        if (!_borrowing)
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
                        Math.Min(_pool.MaxBufferSize, (int)Math.Min(int.MaxValue, _borrowedEnd - runningIndex))),
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
        // Some bytes are unsent (else the write would have completed), so there is at least one copy.
        last!.Next = after;
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
        _borrowing = false;
        return _flush.Complete(new FlushResult(isCanceled: error is null, isCompleted: false), error,
            _inlineContinuations);
    }

    /// <summary>No borrowed write waits any more (all of it sent, or the sender gone): a cancel that came too late is
    /// dropped.</summary>
    private void EndBorrowing()
    {
        _borrowing = false;
        _unborrowRequested = false;
        _unborrowError = null;
    }
}
