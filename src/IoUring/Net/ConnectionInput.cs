using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.ExceptionServices;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Loops;
using IoUring.Rings;

namespace IoUring.Net;

/// <summary>
/// A connection's <see cref="IoUringConnection.Input"/>: a <see cref="PipeReader"/> over the loop's receive buffers
/// themselves. A ring buffer the kernel filled at least half is kept as it is (the ring gets a spare block in its place,
/// <see cref="ReceiveBuffers.Take"/>), so bulk bytes are never copied in user space; smaller receives are copied onto the
/// end of the last block, so a trickle of small receives cannot hold a block each. Blocks go back to the loop's spares
/// as the reader consumes them.
/// </summary>
/// <remarks>
/// <para>The contract is <see cref="Pipe"/>'s reader's: a read completes when there are bytes the reader has not
/// examined (at least <c>minimumSize</c> unconsumed ones for ReadAtLeastAsync), when the writer completed (its error
/// is thrown by every read from then on), or when cancelled; one read at a time, each followed by one AdvanceTo.
/// Backpressure is the pipe's too: once the unconsumed bytes reach the pause threshold, <see cref="Write"/> says so and
/// the receiver stops receiving; when the reader brings them below the resume threshold (half of it), the receiver is
/// told on the loop (<see cref="ConnectionReceiver.OnInputResumed"/>).</para>
/// <para>Threads: the writer side (<see cref="Write"/>, <see cref="CompleteWriter"/>) runs on the loop thread, the
/// reader side on the application's; both take one lock, once per completion or call. Read continuations run on the
/// thread pool (inline when the settings prefer inline scheduling), never under the lock.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class ConnectionInput : PipeReader, IValueTaskSource<ReadResult>
{
    private static readonly Action<object?> s_onResumed = static r => ((ConnectionReceiver)r!).OnInputResumed();
    private static readonly Action<object?> s_onReaderGone = static r => ((ConnectionReceiver)r!).OnInputReaderGone();
    private static readonly Action<object?, CancellationToken> s_onReadCancelled = static (i, token) => ((ConnectionInput)i!).OnReadCancelled(token);

    /// <summary>Unconsumed bytes up to which <see cref="Write"/> leaves a waiting read waiting when more follows at once.</summary>
    internal const int MaxHeldForMore = 64 * 1024;

    private readonly object _sync;    // the receiver: internal, locked by nothing else (no lock object per connection)
    private readonly ConnectionReceiver _receiver;
    private readonly EventLoop _loop;
    private readonly ReceiveBuffers _buffers;
    private readonly int _blockSize;
    private readonly long _pauseThreshold;  // 0: never pauses
    private readonly long _resumeThreshold;
    private readonly bool _inlineContinuations;

    // Guarded by _sync.
    private Segment? _head;           // the oldest unconsumed bytes' block (null: nothing held)
    private int _headIndex;
    private Segment? _tail;           // the newest block, still written to while it has room
    private Segment? _spareSegments;  // released segment objects, reused
    private long _written;            // bytes appended since the start
    private long _consumed;           // bytes the reader consumed since the start
    private long _examined;           // how far the reader examined: a read waits for bytes past it
    private ReadState _readState;     // what the last result asks of the reader before its next read
    private Waiter<ReadResult> _read; // a read waiting, completed by the first of Write, CompleteWriter,
                                      // CancelPendingRead and its token (mutable struct: never readonly)
    private int _pendingMinimum;      // that read's minimumSize (ReadAtLeastAsync), 0 for ReadAsync
    private bool _cancelNextRead;     // CancelPendingRead with no read waiting
    private bool _writerCompleted;
    private Exception? _writerError;
    private bool _readerCompleted;
    private bool _writerPaused;       // Write said pause, and the receiver has not been told to resume since
    private bool _lent;               // a CopyToAsync to an Output runs (it lends each result's blocks): Complete keeps them until it ends
    private long _copyingEnd;         // the stream offset up to which that copy's current write lends (the reader's; read by MayHaveUnconsumed)

    public ConnectionInput(ConnectionReceiver receiver, EventLoop loop, long pauseThreshold, bool inlineContinuations)
    {
        _receiver = receiver;
        _sync = receiver;
        _loop = loop;
        _buffers = loop.ReceiveBuffers;
        _blockSize = _buffers.BufferSize;
        _pauseThreshold = pauseThreshold;
        _resumeThreshold = pauseThreshold > 0 ? Math.Max(1, pauseThreshold / 2) : 0; // at least 1, or receiving could never resume
        _inlineContinuations = inlineContinuations;
    }

    /// <summary>Bytes received and not yet consumed by the reader (any thread; a snapshot).</summary>
    public long Unconsumed
    {
        get
        {
            lock (_sync)
            {
                return _written - _consumed;
            }
        }
    }

    /// <summary>
    /// Whether bytes the application has yet to act on are waiting (any thread, without the lock: a hint, stale as soon
    /// as read): received and not consumed, past what a CopyToAsync is writing out. An application answering requests
    /// with such bytes waiting (pipelined ones) will soon write again.
    /// </summary>
    internal bool MayHaveUnconsumed => Volatile.Read(ref _written) > Math.Max(Volatile.Read(ref _consumed), Volatile.Read(ref _copyingEnd));

    /// <summary>Memory held for the unconsumed bytes: the blocks of the sequence a read would return (tests).</summary>
    internal long HeldBytes
    {
        get
        {
            lock (_sync)
            {
                long blocks = 0;
                for (Segment? segment = _head; segment is not null; segment = (Segment?)segment.Next)
                {
                    blocks++;
                }
                return blocks * _blockSize;
            }
        }
    }

    /// <summary>Whether receiving must stay paused (the reader has not brought the backlog below the resume threshold).</summary>
    public bool WriterPaused
    {
        get
        {
            lock (_sync)
            {
                return _writerPaused;
            }
        }
    }

    // ---- Writer side: the loop thread ----

    /// <summary>
    /// Appends a completion's bytes, keeping the ring buffers filled at least half (see the class summary), and completes
    /// a waiting read that can now complete. <see cref="InputWrite.Paused"/>: the backlog reached the pause threshold,
    /// stop receiving until <see cref="ConnectionReceiver.OnInputResumed"/>. <see cref="InputWrite.ReaderGone"/>: the
    /// reader completed, the bytes are dropped (as a pipe's flush reports it: a reader completing while receiving goes on
    /// is noticed here, at the next receive; one completing while paused is posted).
    /// <paramref name="moreFollows"/>: the receiver's next completion brings more bytes at once (the socket still holds
    /// some and the next RECV is being armed), so a waiting read is left waiting for it until
    /// <see cref="MaxHeldForMore"/> bytes are unconsumed: the reader wakes once per batch, not once per ring buffer. The
    /// receiver calls <see cref="WakeReader"/> when no such completion follows after all.
    /// </summary>
    public InputWrite Write(ReceivedBytes data, bool moreFollows = false)
    {
        AwaiterCompletion completion = default;
        bool paused;
        lock (_sync)
        {
            if (_readerCompleted || _writerCompleted)
            {
                return _readerCompleted ? InputWrite.ReaderGone : InputWrite.Accepted;
            }
            ReceivedBytes.Enumerator buffers = data.GetEnumerator();
            while (buffers.MoveNext())
            {
                Append(buffers.Current, buffers.CurrentBufferId);
            }
            paused = AfterAppend(moreFollows, ref completion);
        }
        completion.Run();
        return paused ? InputWrite.Paused : InputWrite.Accepted; // a reader that clears it later posts OnInputResumed
    }

    /// <summary>
    /// As <see cref="Write"/>, for a receive into the receiver's own spare blocks (a vectored RECVMSG): the first
    /// <paramref name="length"/> bytes of <paramref name="blocks"/>, filled in order, each up to
    /// <paramref name="lengths"/>. Input takes the blocks it keeps; the rest go back to the spares, whatever the outcome.
    /// </summary>
    public InputWrite WriteBlocks(ReadOnlySpan<ReceiveBlock> blocks, ReadOnlySpan<int> lengths, int length, bool moreFollows)
    {
        AwaiterCompletion completion = default;
        bool paused;
        lock (_sync)
        {
            if (_readerCompleted || _writerCompleted)
            {
                length = 0; // dropped, as Write drops them
            }
            int i = 0;
            try
            {
                for (; i < blocks.Length; i++)
                {
                    int filled = Math.Min(lengths[i], length);
                    length -= filled;
                    if (filled >= _blockSize / 2)
                    {
                        AppendSegment(blocks[i]).SetEnd(filled);
                        _written += filled;
                    }
                    else
                    {
                        if (filled > 0)
                        {
                            AppendCopy(blocks[i].Array.AsSpan(blocks[i].Offset, filled)); // may fail to rent a block
                        }
                        _buffers.Spares.Return(blocks[i]);
                    }
                }
            }
            finally
            {
                for (; i < blocks.Length; i++)
                {
                    _buffers.Spares.Return(blocks[i]); // the failed one and the rest: never leaked
                }
            }
            if (_readerCompleted || _writerCompleted)
            {
                return _readerCompleted ? InputWrite.ReaderGone : InputWrite.Accepted;
            }
            paused = AfterAppend(moreFollows, ref completion);
        }
        completion.Run();
        return paused ? InputWrite.Paused : InputWrite.Accepted;
    }

    // Under the lock, after bytes were appended: pauses at the threshold, and completes a waiting read that can complete
    // (unless more follows at once; see Write). Returns whether the writer is paused.
    private bool AfterAppend(bool moreFollows, ref AwaiterCompletion completion)
    {
        long backlog = _written - _consumed;
        if (_pauseThreshold > 0 && backlog >= _pauseThreshold && backlog >= _pendingMinimum)
        {
            _writerPaused = true;
        }
        if (_read.IsWaiting && CanCompleteRead(_pendingMinimum) && !(moreFollows && !_writerPaused && backlog < MaxHeldForMore))
        {
            completion = CompletePendingRead(canceled: false, error: null);
        }
        return _writerPaused;
    }

    /// <summary>Completes a waiting read that <see cref="Write"/> left waiting for more (see there), if it can complete.</summary>
    public void WakeReader()
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            if (_read.IsWaiting && CanCompleteRead(_pendingMinimum))
            {
                completion = CompletePendingRead(canceled: false, error: null);
            }
        }
        completion.Run();
    }

    /// <summary>
    /// No more bytes: the peer's FIN (<paramref name="error"/> null) or a failure every read throws from now on. The first
    /// completion stands (as a pipe's): an abort after the peer's FIN leaves the bytes before it readable.
    /// </summary>
    public void CompleteWriter(Exception? error)
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            if (_writerCompleted)
            {
                return;
            }
            _writerCompleted = true;
            _writerError = error;
            if (_read.IsWaiting)
            {
                completion = CompletePendingRead(canceled: false, error);
            }
        }
        completion.Run();
    }

    private void Append(ReadOnlySpan<byte> bytes, ushort bufferId)
    {
        if (bytes.Length < _blockSize / 2)
        {
            AppendCopy(bytes);
            return;
        }
        // Worth a block of its own: keep the ring's buffer (the bytes are at its start), a spare takes its place.
        AppendSegment(_buffers.Take(bufferId)).SetEnd(bytes.Length);
        _written += bytes.Length;
    }

    // Copies a small receive onto the end of the last block (a spare block when it has no room).
    private void AppendCopy(ReadOnlySpan<byte> bytes)
    {
        Segment? tail = _tail;
        if (tail is null || _blockSize - tail.End < bytes.Length)
        {
            tail = AppendSegment(_buffers.Spares.Rent());
        }
        bytes.CopyTo(tail.Block.Array.AsSpan(tail.Block.Offset + tail.End));
        tail.SetEnd(tail.End + bytes.Length);
        _written += bytes.Length;
    }

    private Segment AppendSegment(ReceiveBlock block)
    {
        Segment segment = _spareSegments ?? new Segment();
        _spareSegments = (Segment?)segment.Next;
        segment.Reset(block, runningIndex: _written);
        if (_tail is null)
        {
            _head = segment;
            _headIndex = 0;
        }
        else
        {
            _tail.SetNext(segment);
        }
        _tail = segment;
        return segment;
    }

    // ---- Reader side: the application ----

    public override ValueTask<ReadResult> ReadAsync(CancellationToken cancellationToken = default) => Read(0, cancellationToken);

    protected override ValueTask<ReadResult> ReadAtLeastAsyncCore(int minimumSize, CancellationToken cancellationToken) => Read(minimumSize, cancellationToken);

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
                ExceptionDispatchInfo.Throw(error);
            }
            if (_written > _consumed || _writerCompleted)
            {
                TakeResult(out result, canceled: false);
                return true;
            }
            _readState = ReadState.Tentative; // as a pipe's: AdvanceTo may follow, need not
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
            if (_readState == ReadState.None)
            {
                throw new InvalidOperationException("No read to advance: AdvanceTo must follow a read's result.");
            }
            long consumedAt = IndexOf(consumed);
            long examinedAt = IndexOf(examined);
            if (consumedAt < _consumed || consumedAt > _written || examinedAt < consumedAt || examinedAt > _written)
            {
                throw new InvalidOperationException("The positions passed to AdvanceTo are not of the last read's buffer, or examined is before consumed.");
            }
            _readState = ReadState.None;
            _examined = examinedAt;
            _consumed = consumedAt;
            ReleaseConsumed();
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

    /// <summary>
    /// Copies everything to <paramref name="destination"/> until the end of the stream, as <see cref="PipeReader"/>'s does.
    /// To a connection's Output the received blocks are not copied: each read's bytes are lent to it as they are (a
    /// large enough write is sent from them, <see cref="ConnectionOutput.WriteAsync(in ReadOnlySequence{byte}, CancellationToken)"/>)
    /// and consumed once it is done with them; completing this reader meanwhile keeps the blocks until then, so the ring
    /// never receives into memory a send may still read. Ends when the destination completes or this reader is completed.
    /// </summary>
    public override Task CopyToAsync(PipeWriter destination, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(destination);
        return destination is ConnectionOutput output
            ? CopyToOutputAsync(output, cancellationToken)
            : base.CopyToAsync(destination, cancellationToken);
    }

    private async Task CopyToOutputAsync(ConnectionOutput output, CancellationToken cancellationToken)
    {
        // Lent for the whole copy, not per write: a Complete (a proxy disposing this connection) between a read's
        // result and its write would otherwise release the blocks under the result. From then on the copy just ends.
        BeginLending();
        try
        {
            while (true)
            {
                ReadResult result;
                try
                {
                    result = await ReadAsync(cancellationToken).ConfigureAwait(false);
                }
                catch (InvalidOperationException) when (IsReaderCompleted)
                {
                    return; // completed before the read began
                }
                if (IsReaderCompleted)
                {
                    return; // completed while the read waited: its blocks go back below
                }
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (result.IsCanceled)
                {
                    AdvanceTo(buffer.Start);
                    throw new OperationCanceledException("The read was canceled (CancelPendingRead).");
                }
                FlushResult flush = default;
                if (!buffer.IsEmpty)
                {
                    try
                    {
                        // A read returns from the consumed offset: these bytes are being answered, not waiting.
                        Volatile.Write(ref _copyingEnd, Volatile.Read(ref _consumed) + buffer.Length);
                        flush = await output.WriteAsync(buffer, cancellationToken).ConfigureAwait(false);
                    }
                    catch
                    {
                        // Output holds none of the memory any more (a cancelled write's unsent bytes were copied, a
                        // failed one's dropped): consumed.
                        TryAdvance(buffer.End);
                        throw;
                    }
                }
                if (!TryAdvance(buffer.End))
                {
                    return;
                }
                if (flush.IsCanceled)
                {
                    throw new OperationCanceledException("The flush was canceled (CancelPendingFlush).");
                }
                if (flush.IsCompleted || result.IsCompleted)
                {
                    return;
                }
            }
        }
        finally
        {
            EndLending();
        }
    }

    private bool IsReaderCompleted => Volatile.Read(ref _readerCompleted);

    /// <summary>AdvanceTo, unless the reader was completed meanwhile (false: nothing to advance, the copy ends).</summary>
    private bool TryAdvance(SequencePosition consumed)
    {
        try
        {
            AdvanceTo(consumed);
            return true;
        }
        catch (InvalidOperationException) when (IsReaderCompleted)
        {
            return false;
        }
    }

    private void BeginLending()
    {
        lock (_sync)
        {
            _lent = true;
        }
    }

    /// <summary>The copy is over and no Output holds the blocks: if the reader was completed meanwhile, they go back now.</summary>
    private void EndLending()
    {
        lock (_sync)
        {
            _lent = false;
            if (_readerCompleted)
            {
                _consumed = _written;
                ReleaseConsumed();
            }
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
            _readState = ReadState.None;
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

    // ---- Shared, under _sync ----

    private bool CanCompleteRead(int minimumSize)
        => _writerCompleted || (minimumSize > 0 ? _written - _consumed >= minimumSize : _written > _examined);

    /// <summary>
    /// Sets the waiting read's outcome: the bytes held (the reader then owes an AdvanceTo, optional after a canceled
    /// result, as with a pipe), or <paramref name="error"/>. Takes its awaiter's continuation, if it registered one, to
    /// run after the lock, as the returned <see cref="AwaiterCompletion"/> does. Everything the awaiter and the next read see
    /// changes here, under the lock: a read's completion cannot race the next read's start.
    /// </summary>
    private AwaiterCompletion CompletePendingRead(bool canceled, Exception? error)
    {
        _pendingMinimum = 0;
        ReadResult result = default;
        if (error is null)
        {
            TakeResult(out result, canceled);
        }
        return _read.Complete(result, error, _inlineContinuations);
    }

    /// <summary>Makes a result of the bytes held now; the reader then owes an AdvanceTo (optional after a canceled one).</summary>
    private void TakeResult(out ReadResult result, bool canceled)
    {
        ReadOnlySequence<byte> buffer = _head is null ? default : new ReadOnlySequence<byte>(_head, _headIndex, _tail!, _tail!.End);
        result = new ReadResult(buffer, canceled, isCompleted: _writerCompleted);
        _readState = canceled ? ReadState.Tentative : ReadState.Reading;
    }

    private void ThrowIfCannotRead()
    {
        if (_readerCompleted)
        {
            throw new InvalidOperationException("Reading is not allowed after the reader was completed.");
        }
        if (_read.IsWaiting || _readState == ReadState.Reading)
        {
            throw new InvalidOperationException("Reading is already in progress: a read must be followed by AdvanceTo before the next.");
        }
    }

    private long IndexOf(SequencePosition position)
    {
        // A default position is the start of an empty buffer: nothing was held when the read returned.
        return position.GetObject() is Segment segment ? segment.RunningIndex + position.GetInteger() : _consumed;
    }

    // Gives back every block whose bytes are all consumed (the last one too: an idle connection holds no memory).
    private void ReleaseConsumed()
    {
        while (_head is { } head && head.RunningIndex + head.End <= _consumed && (head != _tail || _consumed == _written))
        {
            _head = (Segment?)head.Next;
            if (head == _tail)
            {
                _tail = null;
            }
            _buffers.Spares.Return(head.Block);
            head.Reset(default, 0);
            head.SetNext(_spareSegments);
            _spareSegments = head;
        }
        _headIndex = _head is null ? 0 : (int)(_consumed - _head.RunningIndex);
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

    void IValueTaskSource<ReadResult>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _read.OnCompleted(_sync, continuation, state, token, flags, _inlineContinuations);

    private enum ReadState
    {
        /// <summary>No result outstanding: the next read may start.</summary>
        None,
        /// <summary>A result was returned: AdvanceTo must come before the next read.</summary>
        Reading,
        /// <summary>A canceled result, or TryRead found nothing: AdvanceTo may come, need not.</summary>
        Tentative,
    }

    /// <summary>What <see cref="Write"/> asks of the receiver.</summary>
    public enum InputWrite
    {
        Accepted,
        Paused,
        ReaderGone,
    }

    /// <summary>One block of the sequence a read returns: bytes [0, End) of its <see cref="ReceiveBlock"/>.</summary>
    private sealed class Segment : ReadOnlySequenceSegment<byte>
    {
        public ReceiveBlock Block { get; private set; }

        public int End { get; private set; }

        public void Reset(ReceiveBlock block, long runningIndex)
        {
            Block = block;
            End = 0;
            Memory = default;
            Next = null;
            RunningIndex = runningIndex;
        }

        public void SetEnd(int end)
        {
            Debug.Assert(end >= End);
            End = end;
            Memory = Block.Array.AsMemory(Block.Offset, end);
        }

        public void SetNext(Segment? next) => Next = next;
    }
}
