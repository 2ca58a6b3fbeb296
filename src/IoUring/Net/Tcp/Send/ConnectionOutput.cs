using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Buffers;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A connection's <see cref="IoUringConnection.Output"/>: a <see cref="PipeWriter"/> whose flushed bytes
/// <see cref="ConnectionSender"/> sends from the blocks they were written to.
/// </summary>
/// <remarks>
/// <para>The contract is <see cref="Pipe"/>'s writer's (pause at MaxWriteBufferSize, resume below half; once the sender
/// is gone flushes return IsCompleted or throw its error), but every flush waits while the buffered bytes are at or
/// above the threshold, not only one whose commit crossed it.</para>
/// <para>The writer side runs on the application's threads, the sender side (.LoopSide) on the loop; one lock, never
/// held by a flush continuation.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionOutput : PipeWriter, IValueTaskSource<FlushResult>
{
    /// <summary>The smallest write sent from the caller's memory (below it a copy costs less than the wait).</summary>
    internal const int MinimumBorrowedWrite = 32 * 1024;

    /// <summary>The most bytes a flush sends from its own thread; more go through the ring.</summary>
    internal const int MaxCallerSend = 64 * 1024;
    internal const int MaxCallerSendSegments = 8;

    private static readonly Action<object?> s_onFlushed = static s => ((ConnectionSender)s!).OnOutputFlushed();
    private static readonly Action<object?> s_onCallerSendFailed =
        static s => ((ConnectionSender)s!).OnCallerSendFailed();
    private static readonly Action<object?> s_onBorrowedWriteCancelled =
        static s => ((ConnectionSender)s!).OnBorrowedWriteCancelled();
    private static readonly Action<object?, CancellationToken> s_onFlushCancelled =
        static (o, token) => ((ConnectionOutput)o!).OnFlushCancelled(token);

    private readonly object _sync;           // an internal object of the connection locked by nothing else
    private readonly EventLoop _loop;
    private readonly MemoryPool<byte> _pool;
    private readonly OutputSegmentPool _segments;
    private readonly long _pauseThreshold;   // 0: flushes never wait
    private readonly long _resumeThreshold;
    private readonly long _borrowedWriteThreshold; // a WriteAsync at least this large is sent from the caller's memory
    private readonly int _minimumSegment;
    private readonly bool _inlineContinuations;
    private readonly int _fd;                // the socket, for sends from the flushing thread
    private readonly long _callerSendLimit;  // the most bytes a flush sends itself (0: never)
    private ConnectionSender? _sender;
    private ConnectionInput? _input;

    // The writer's own (its thread, one writer at a time).
    private Memory<byte> _writable;   // the free rest of _tail's block, while _writing
    private long _unflushed;          // bytes advanced since the last commit

    // Guarded by _sync.
    private bool _writing;            // the writer holds memory of _tail (GetMemory until the next commit): _tail stays
    private OutputSegment? _head;     // the oldest unsent bytes' block (null: nothing held)
    private int _headIndex;
    private OutputSegment? _tail;     // the block the writer writes in
    private OutputSegment? _commitFrom; // the tail at the last commit: blocks before it are all committed (null: _head)
    private long _committed;          // bytes flushed since the start: the sender may send up to here
    private long _sent;               // bytes the sender is done with (or dropped)
    private long _pinnedBySender;     // of _sent, bytes zero-copy sends still pin until their notifications
    private bool _senderWaiting;      // the sender found nothing to send: the next commit posts it
    private Waiter<FlushResult> _flush; // a flush waiting for the sender to catch up (mutable struct: never readonly)
    private bool _cancelNextFlush;    // CancelPendingFlush with no flush waiting
    private bool _borrowedWritePending; // the waiting flush is a WriteAsync whose memory segments hold
    private long _borrowedWriteEnd;     // ... until the bytes up to here are sent
    private bool _borrowedWriteCancelled; // ... it was cancelled: the sender copies the rest once no send is in flight
    private Exception? _borrowedWriteCancelError; // the cancelled write's outcome: null for IsCanceled
    private bool _writerCompleted;
    private Exception? _writerError;
    private bool _senderCompleted;
    private Exception? _senderError;
    private FileSender? _file;        // the file send queued or running: one at a time
    private long _fileAt;             // where it goes: the output's committed bytes when it was queued
    private long _bytesSentByCallers; // of _sent, the bytes flushing threads sent themselves
    private int _callerSendsCutShort; // caller sends that left bytes to the ring (partial, EAGAIN): tests

    /// <summary><paramref name="pauseThreshold"/>: 0 for flushes that never wait; <paramref name="fd"/>: open until the
    /// sender has completed; <paramref name="callerSendLimit"/>: 0 for no caller sends.</summary>
    public ConnectionOutput(object syncRoot, EventLoop loop, MemoryPool<byte> pool, OutputSegmentPool segments,
        long pauseThreshold, bool inlineContinuations, int fd, long callerSendLimit)
    {
        _fd = fd;
        _callerSendLimit = Math.Min(callerSendLimit, MaxCallerSend);
        _sync = syncRoot;
        _loop = loop;
        _pool = pool;
        _segments = segments;
        _pauseThreshold = pauseThreshold;
        // as a pipe's: at least 1, or a flush could never resume
        _resumeThreshold = pauseThreshold > 0 ? Math.Max(1, pauseThreshold / 2) : 0;
        // A write at the pause threshold waits for the sender anyway, so borrowing it saves the copy at little cost.
        _borrowedWriteThreshold = pauseThreshold > 0 ? Math.Max(pauseThreshold, MinimumBorrowedWrite) : long.MaxValue;
        // Whole pool blocks, and no tiny buffers from a pool that gives what is asked for (MemoryPool<byte>.Shared).
        _minimumSegment = Math.Min(PinnedBlockMemoryPool.BlockSize, pool.MaxBufferSize);
        _inlineContinuations = inlineContinuations;
    }

    /// <summary>Set once, before the connection starts.</summary>
    public void SetSender(ConnectionSender sender, ConnectionInput input)
    {
        _sender = sender;
        _input = input;
    }

    /// <summary>Bytes flushed and not yet sent (any thread; a snapshot).</summary>
    public long Unsent
    {
        get
        {
            lock (_sync)
            {
                return _committed - _sent;
            }
        }
    }

    public long BytesSentByCallers => Volatile.Read(ref _bytesSentByCallers);

    /// <summary>Caller sends that left bytes to the ring (tests).</summary>
    internal int CallerSendsCutShort => Volatile.Read(ref _callerSendsCutShort);

    /// <summary>Blocks buffered (tests).</summary>
    internal int BufferedBlocks
    {
        get
        {
            lock (_sync)
            {
                int blocks = 0;
                for (OutputSegment? segment = _head; segment is not null; segment = segment.Next)
                {
                    blocks++;
                }
                return blocks;
            }
        }
    }

    /// <summary>Unsent bytes plus those sent zero-copy and still pinned: flushes wait on both, so a stalled peer holds
    /// MaxWriteBufferSize either way.</summary>
    private long BufferedBytesUnsynchronized => _committed - _sent + _pinnedBySender;

    // ---- Writer side: the application's thread ----

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
                CommitUnsynchronized();
                if (_senderCompleted)
                {
                    result = _senderError is { } error ? ValueTask.FromException<FlushResult>(error)
                        : new ValueTask<FlushResult>(new FlushResult(isCanceled: false, isCompleted: true));
                }
                else
                {
                    if (TakeSenderWaitingUnsynchronized())
                    {
                        postSender = SendFromCallerUnsynchronized();
                    }
                    if (_flush.IsWaiting)
                    {
                        // As with a pipe, this flush joins the one already waiting; its token may cancel the wait too.
                        version = _flush.Join(cancellationToken, out register);
                        result = new ValueTask<FlushResult>(this, version);
                    }
                    else if (_cancelNextFlush)
                    {
                        _cancelNextFlush = false;
                        result = new ValueTask<FlushResult>(new FlushResult(isCanceled: true, isCompleted: false));
                    }
                    else if (_pauseThreshold == 0 || BufferedBytesUnsynchronized < _pauseThreshold)
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

    /// <summary>What was written is sent, then FIN; with <paramref name="exception"/> the connection fails instead
    /// (abortive close), so the peer cannot take the stream for complete.</summary>
    public override void Complete(Exception? exception = null)
    {
        bool postSender;
        lock (_sync)
        {
            if (_writerCompleted)
            {
                return;
            }
            CommitUnsynchronized();
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
                bool large = size > _pool.MaxBufferSize && size <= EventLoop.LargeBlockSize;
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
            ReleaseSentUnsynchronized(); // the block the writer moved on from may be sent already
        }
    }

    private void CommitUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a commit without the lock");
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
        ReleaseSentUnsynchronized(); // a block asked for and not written in (or already sent) is not held
        Debug.Assert(_sent <= _committed, "sent past what was flushed");
    }

    private bool TakeSenderWaitingUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "the sender's wait taken without the lock");
        if (_senderWaiting && _committed > _sent)
        {
            _senderWaiting = false;
            return true;
        }
        return false;
    }

    // ---- Shared ----

    private void ReturnSegments(OutputSegment? first, OutputSegment? end)
    {
        for (OutputSegment? segment = first; segment != end;)
        {
            OutputSegment? next = segment!.Next;
            segment.Release();
            _segments.Return(segment);
            segment = next;
        }
    }

    // The last block goes too unless the writer is in it: a connection with nothing to send holds no memory.
    private void ReleaseSentUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "blocks released without the lock");
        while (_head is { } head && (head != _tail || !_writing) && head.RunningIndex + head.Written <= _sent)
        {
            _head = head.Next;
            if (head == _tail)
            {
                _tail = null;
            }
            if (head == _commitFrom)
            {
                _commitFrom = null;
            }
            head.Release();
            _segments.Return(head);
        }
        _headIndex = _head is null ? 0 : (int)(_sent - _head.RunningIndex);
    }
}
