using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// A connection's <see cref="IoUringConnection.Output"/>: a <see cref="PipeWriter"/> whose flushed bytes the
/// connection's <see cref="ConnectionSender"/> sends from the very blocks they were written to, then gives back.
/// </summary>
/// <remarks>
/// <para>The contract is <see cref="Pipe"/>'s writer's: bytes written (GetMemory/GetSpan, Advance) are sent only once
/// flushed (or at Complete, which commits them too); a flush waits while the unsent bytes are at least the pause threshold
/// (MaxWriteBufferSize) until the sender brings them below the resume threshold (half of it); CancelPendingFlush ends the
/// waiting flush, or the next one, with IsCanceled; once the sender is gone (the connection closed, the peer reset or
/// stopped reading) flushes return IsCompleted, or throw the send error that ended it, and unsent bytes are dropped.
/// Completing with an exception fails the connection (abortive close) instead of sending what is left. As with a pipe,
/// a flush while another waits joins it, and a flush after Complete returns (no error). One difference: a pipe pauses
/// only when a commit crosses the threshold, so after a cancelled flush its next flush returns at once while the unsent
/// bytes are still above it; here every flush waits while they are at or above the threshold.</para>
/// <para>Threads: the writer side runs on the application's threads (one writer at a time), the sender side
/// (<see cref="TryTake"/>, <see cref="Consume"/>, <see cref="CompleteSender"/>) on the loop thread; they share one lock,
/// taken once per flush, per send completion and for each block the writer starts (not per GetMemory within one: the
/// block the writer writes in is never released under it). A flush that gives the sender bytes while it waits for some
/// posts it to the loop (<see cref="ConnectionSender.OnOutputFlushed"/>), or, while the loop sleeps, sends them itself
/// first (<see cref="SendFromCaller"/>: one send(2) instead of an eventfd write and a loop wake-up). Flush continuations run on the thread pool
/// (inline when the settings prefer inline scheduling), never under the lock.</para>
/// <para>Memory: blocks from the connection's pool (larger writes than its blocks: <see cref="ArrayPool{T}"/> arrays),
/// each given back as soon as the sender has sent all of it; a connection with nothing unsent and no write in progress
/// holds none. A <see cref="WriteAsync(ReadOnlyMemory{byte}, CancellationToken)"/> at least as large as the pause threshold is not copied: the sender sends from
/// the caller's memory, never zero-copy, and the write completes once all of it is sent (or, cancelled, once no send
/// reads it, its unsent bytes copied into blocks). Such a write of at most <see cref="MaxCallerSend"/> (with anything
/// unsent before it) may go in the writing thread's own send, as any flush's bytes may; all of it sent there, the
/// write completes at once.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class ConnectionOutput : PipeWriter, IValueTaskSource<FlushResult>
{
    /// <summary>The smallest write sent from the caller's memory (below it a copy costs less than the wait).</summary>
    internal const int MinimumBorrow = 32 * 1024;

    /// <summary>The most bytes a flush sends from its own thread (<see cref="SendFromCaller"/>); more go through the ring.</summary>
    internal const int MaxCallerSend = 64 * 1024;
    private const int MaxCallerSendSegments = 8;

    private static readonly Action<object?> s_onFlushed = static s => ((ConnectionSender)s!).OnOutputFlushed();
    private static readonly Action<object?> s_onCallerSendFailed = static s => ((ConnectionSender)s!).OnCallerSendFailed();
    private static readonly Action<object?> s_onUnborrowRequested = static s => ((ConnectionSender)s!).OnUnborrowRequested();
    private static readonly Action<object?, CancellationToken> s_onFlushCancelled = static (o, token) => ((ConnectionOutput)o!).OnFlushCancelled(token);

    private readonly object _sync;    // an internal object of the connection locked by nothing else (no lock object per connection)
    private readonly EventLoop _loop;
    private readonly MemoryPool<byte> _pool;
    private readonly SegmentPool _segments;
    private readonly long _pauseThreshold;  // 0: flushes never wait
    private readonly long _resumeThreshold;
    private readonly long _borrowThreshold; // a WriteAsync at least this large is sent from the caller's memory
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
    private Segment? _head;           // the oldest unsent bytes' block (null: nothing held)
    private int _headIndex;
    private Segment? _tail;           // the block the writer writes in
    private Segment? _commitFrom;     // the tail at the last commit: blocks before it are all committed (null: from _head)
    private long _committed;          // bytes flushed since the start: the sender may send up to here
    private long _sent;               // bytes the sender is done with (or dropped)
    private long _pinnedBySender;     // of _sent, bytes zero-copy sends still pin until their notifications
    private bool _senderWaiting;      // the sender found nothing to send: the next commit posts it
    private Waiter<FlushResult> _flush; // a flush waiting for the sender to catch up (mutable struct: never readonly)
    private bool _cancelNextFlush;    // CancelPendingFlush with no flush waiting
    private bool _borrowing;          // the waiting flush is a WriteAsync whose caller's memory a segment holds (one, until _borrowedEnd is sent)
    private long _borrowedEnd;
    private bool _unborrowRequested;  // that write was cancelled: the sender copies what is left once no send is in flight
    private Exception? _unborrowError; // the cancelled write's outcome: its token's exception, or null for IsCanceled
    private bool _writerCompleted;
    private Exception? _writerError;
    private bool _senderCompleted;
    private Exception? _senderError;
    private long _bytesSentByCallers;  // of _sent, the bytes flushing threads sent themselves
    private int _callerSendsCutShort;  // caller sends that left bytes to the ring (partial, EAGAIN): tests

    /// <param name="syncRoot">The lock: an internal object of the connection that nothing else locks.</param>
    /// <param name="loop">The loop whose thread sends.</param>
    /// <param name="pool">Where the blocks come from.</param>
    /// <param name="pauseThreshold">Unsent bytes at which a flush waits (MaxWriteBufferSize), 0 for never.</param>
    /// <param name="segments">The network's segment objects, shared by its outputs.</param>
    /// <param name="inlineContinuations">Run flush continuations inline (UnsafePreferInlineScheduling).</param>
    /// <param name="fd">The connection's socket: it stays open until the sender has completed (<see cref="CompleteSender"/>).</param>
    /// <param name="callerSendLimit">The most flushed bytes a flush sends from its own thread while the sender may send them
    /// zero-copy, 0 for never (see <see cref="SendFromCaller"/>).</param>
    public ConnectionOutput(object syncRoot, EventLoop loop, MemoryPool<byte> pool, SegmentPool segments, long pauseThreshold, bool inlineContinuations, int fd, long callerSendLimit)
    {
        _fd = fd;
        _callerSendLimit = Math.Min(callerSendLimit, MaxCallerSend);
        _sync = syncRoot;
        _loop = loop;
        _pool = pool;
        _segments = segments;
        _pauseThreshold = pauseThreshold;
        _resumeThreshold = pauseThreshold > 0 ? Math.Max(1, pauseThreshold / 2) : 0; // as a pipe's: at least 1, or a flush could never resume
        // A write that reaches the pause threshold waits for the sender anyway, so waiting until all of it is sent costs
        // the caller little and saves copying it; without a threshold flushes never wait, so writes are always copied.
        _borrowThreshold = pauseThreshold > 0 ? Math.Max(pauseThreshold, MinimumBorrow) : long.MaxValue;
        // As a pipe's minimum segment size: the blocks of ours and Kestrel's pools whatever is asked for, and no tiny
        // buffers from a pool that gives what is asked for (MemoryPool<byte>.Shared).
        _minimumSegment = Math.Min(PinnedBlockMemoryPool.BlockSize, pool.MaxBufferSize);
        _inlineContinuations = inlineContinuations;
    }

    /// <summary>The sender this output feeds and the connection's input (set once, before the connection starts).</summary>
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

    /// <summary>Bytes flushing threads sent themselves (any thread; counted in the connection's BytesSent).</summary>
    public long BytesSentByCallers => Volatile.Read(ref _bytesSentByCallers);

    /// <summary>Sends by flushing threads that left bytes to the ring: the socket's buffer was full (EAGAIN, a partial send),
    /// or the bytes were in more than <see cref="MaxCallerSendSegments"/> pieces (tests).</summary>
    internal int CallerSendsCutShort => Volatile.Read(ref _callerSendsCutShort);

    /// <summary>Blocks held (tests).</summary>
    internal int HeldBlocks
    {
        get
        {
            lock (_sync)
            {
                int blocks = 0;
                for (Segment? segment = _head; segment is not null; segment = segment.Next)
                {
                    blocks++;
                }
                return blocks;
            }
        }
    }

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
            throw new InvalidOperationException("Advance without memory from GetMemory or GetSpan since the last flush.");
        }
        if ((uint)bytes > (uint)_writable.Length)
        {
            throw new ArgumentOutOfRangeException(nameof(bytes), bytes, "More bytes than the memory GetMemory returned.");
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
                        // A flush already waits (its caller did not await it): this one joins it, as with a pipe.
                        result = new ValueTask<FlushResult>(this, _flush.Join());
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

    /// <summary>
    /// Writes <paramref name="source"/> and flushes. A write of at least the borrow threshold (the pause threshold, at least
    /// <see cref="MinimumBorrow"/>) is not copied: the sender sends it from <paramref name="source"/> itself, and the
    /// returned flush completes only once the kernel has taken all of it (as <c>Socket.SendAsync</c> does), so the caller
    /// may reuse its memory then and not before. Cancelled (its token, or <see cref="CancelPendingFlush"/>), it completes
    /// once no send reads that memory any more, with the bytes not yet sent copied into the output's own blocks: nothing is
    /// lost, they go out after what was sent.
    /// </summary>
    public override ValueTask<FlushResult> WriteAsync(ReadOnlyMemory<byte> source, CancellationToken cancellationToken = default)
    {
        if (source.Length < _borrowThreshold || cancellationToken.IsCancellationRequested)
        {
            return base.WriteAsync(source, cancellationToken); // copied, then flushed
        }
        return TryBorrow(new ReadOnlySequence<byte>(source), cancellationToken) ?? base.WriteAsync(source, cancellationToken);
    }

    /// <summary>
    /// As <see cref="WriteAsync(ReadOnlyMemory{byte}, CancellationToken)"/> for a sequence (<see cref="ConnectionInput"/>'s
    /// CopyToAsync: received blocks sent as they are): the caller keeps <paramref name="source"/>'s memory unchanged until
    /// the flush completes.
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
    /// flush that completes once all of it is sent; null where a plain flush answers without waiting (completed, a flush
    /// already waiting, a cancel for the next flush): the caller copies instead.
    /// </summary>
    private ValueTask<FlushResult>? TryBorrow(in ReadOnlySequence<byte> source, CancellationToken cancellationToken)
    {
        // The segments first, outside the lock: if enumerating the sequence throws, nothing was linked.
        Segment? first = null;
        Segment? last = null;
        foreach (ReadOnlyMemory<byte> piece in source)
        {
            if (piece.IsEmpty)
            {
                continue;
            }
            Segment segment = _segments.Rent();
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
            for (Segment? segment = first; segment is not null; segment = segment.Next)
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
                // This thread sent all of it (as Socket.SendAsync completes a send the socket took at once): its segments
                // went back with the send, so nothing reads the caller's memory any more.
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
                completion = _flush.Complete(new FlushResult(isCanceled: true, isCompleted: false), null, _inlineContinuations);
            }
        }
        PostUnborrow(postUnborrow);
        completion.Run();
    }

    /// <summary>
    /// No more writes: what was written is sent (committed as by a flush), then FIN; with <paramref name="exception"/> the
    /// connection fails instead (abortive close: the peer must not take the stream for complete).
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

    /// <summary>Under the lock: a block with room for <paramref name="sizeHint"/> bytes (at least one) becomes _writable.</summary>
    private void StartWriting(int sizeHint)
    {
        int needed = Math.Max(sizeHint, 1);
        lock (_sync)
        {
            if (_writerCompleted)
            {
                throw new InvalidOperationException("Writing is not allowed after the writer was completed.");
            }
            Segment? tail = _tail;
            if (tail is null || tail.Memory.Length - tail.Written < needed)
            {
                Segment segment = _segments.Rent();
                segment.Rent(_pool, Math.Max(needed, _minimumSegment), runningIndex: tail is null ? _committed : tail.RunningIndex + tail.Written);
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

    /// <summary>Under the lock, by the writer: what it advanced becomes the sender's to send (or is dropped once the sender is gone).</summary>
    private void Commit()
    {
        for (Segment? segment = _commitFrom ?? _head; segment is not null; segment = segment.Next)
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

    /// <summary>
    /// Under the lock, in a flush that found the sender waiting for bytes (no send in flight, none posted) and took that
    /// from it: while the loop sleeps, posting the sender would cost an eventfd write, a wake-up and a loop iteration
    /// before the bytes go (for a request/response exchange, that on every message), so a flush of at most the
    /// caller-send limit sends them from this thread instead, in one non-blocking send(2), as a socket's send does.
    /// Safe here: the sender cannot send meanwhile (the lock; it waits to be posted), and the fd stays open (it is
    /// closed only after <see cref="CompleteSender"/>, which takes the lock, and none is attempted after it).
    /// </summary>
    /// <returns>What to post to the loop: null when every flushed byte went (the sender waits again); the sender's
    /// <see cref="ConnectionSender.OnOutputFlushed"/> for what is left (not tried: the loop is awake, so it batches; a
    /// partial send; EAGAIN); <see cref="ConnectionSender.OnCallerSendFailed"/> for an error, which the sender then
    /// handles as its own send's.</returns>
    private Action<object?>? SendFromCaller()
    {
        if (_callerSendLimit == 0)
        {
            return s_onFlushed; // caller sends are off (TestHooks.NoCallerSends)
        }
        long length = _committed - _sent;
        // _callerSendLimit keeps what is large enough to go zero-copy for the ring; that reason is gone for a borrowed write
        // (never zero-copy) and where the sender does not send zero-copy (it stopped because the kernel copied, as over
        // loopback; or never could: a Unix socket, a pool whose blocks are not pinned, a kernel without SEND_ZC).
        long limit = _borrowing || !_sender!.MaySendZeroCopy ? MaxCallerSend : _callerSendLimit;
        // Not once the application aborted: the loop has yet to close, and what is flushed now is to be dropped.
        if (length > limit || !_loop.IsSleeping || _loop.IsOnLoopThread || _sender!.AbortRequested || MoreSendsLikely())
        {
            return s_onFlushed;
        }
        var bytes = new Sendable(_head!, _headIndex, length, _borrowing); // a borrowed write's memory: read only during this call
        byte opcode = bytes.IsSingleSegment ? IORING_OP_SEND : IORING_OP_SENDMSG;
        int fault = _loop.Faults?.TakeCallerSendFault(opcode) ?? 0;
        long sent;
        int errno = 0;
        if (fault != 0)
        {
            sent = -1;
            errno = fault;
        }
        else
        {
            try
            {
                sent = bytes.IsSingleSegment ? SendSingle(length, out errno) : SendGather(bytes, out errno);
            }
            catch (Exception)
            {
                // A lent write's memory (its MemoryManager's GetSpan or Pin) threw: the flush must not throw with the sender
                // no longer waiting to be posted, so the ring's sender takes the bytes, and fails the connection with the
                // error if it cannot send them either, as for any send of its own.
                return s_onFlushed;
            }
        }
        if (sent < 0)
        {
            if (errno is Errno.EAGAIN or Errno.EINTR)
            {
                _callerSendsCutShort++;
                return s_onFlushed; // the socket's buffer is full: the ring's send waits for room
            }
            _sender!.CallerSendError = errno;
            return s_onCallerSendFailed;
        }
        _sent += sent;
        _bytesSentByCallers += sent;
        _loop.OnCallerSend((int)sent);
        ReleaseSent();
        if (_sent < _committed)
        {
            _callerSendsCutShort++;
            return s_onFlushed;
        }
        _senderWaiting = true; // as before the flush: nothing to send, the next commit posts or sends again
        return null;
    }

    /// <summary>
    /// Whether more flushes are likely before the loop would take this one: then posting costs one wake-up for all of
    /// them and the loop submits their sends together, where each flush sending itself would cost a system call apiece
    /// (Kestrel at 256 connections: 1.32x Sockets' requests per CPU-second sending from every flush against 1.56x
    /// posting; 16 pipelined requests: 0.34x against 1.03x). More are likely when the thread pool has work queued (other
    /// connections' requests, whose flushes come next; the loop's wake queued behind them gathers them) or when this
    /// connection's reader has bytes it has not consumed (pipelined requests, each answered with a flush).
    /// </summary>
    private bool MoreSendsLikely() => _input!.MayHaveUnconsumed || ThreadPool.PendingWorkItemCount != 0;

    /// <summary>send(2) of the <paramref name="length"/> bytes from the head block on (all in it).</summary>
    private unsafe long SendSingle(long length, out int errno)
    {
        ReadOnlySpan<byte> span = _head!.Memory.Span.Slice(_headIndex, (int)length);
        long sent;
        fixed (byte* pointer = span)
        {
            sent = Libc.send(_fd, pointer, (nuint)span.Length, Libc.MSG_DONTWAIT | (int)Libc.MSG_NOSIGNAL);
        }
        errno = sent < 0 ? Libc.GetLastErrno() : 0;
        return sent;
    }

    /// <summary>sendmsg(2) of up to <see cref="MaxCallerSendSegments"/> of the segments (the rest: the ring's next send).</summary>
    private unsafe long SendGather(in Sendable bytes, out int errno)
    {
        PinnedSegments pins = default;
        iovec* iovecs = stackalloc iovec[MaxCallerSendSegments];
        int count = 0;
        try
        {
            foreach (ReadOnlyMemory<byte> segment in bytes)
            {
                if (segment.IsEmpty)
                {
                    continue;
                }
                pins[count] = segment.Pin();
                iovecs[count] = new iovec { iov_base = (nuint)pins[count].Pointer, iov_len = (nuint)segment.Length };
                if (++count == MaxCallerSendSegments)
                {
                    break;
                }
            }
            Libc.msghdr message = new() { msg_iov = iovecs, msg_iovlen = (nuint)count };
            long sent = Libc.sendmsg(_fd, &message, Libc.MSG_DONTWAIT | (int)Libc.MSG_NOSIGNAL);
            errno = sent < 0 ? Libc.GetLastErrno() : 0;
            return sent;
        }
        finally
        {
            for (int i = 0; i < count; i++)
            {
                pins[i].Dispose();
            }
        }
    }

    [System.Runtime.CompilerServices.InlineArray(MaxCallerSendSegments)]
    private struct PinnedSegments
    {
        private MemoryHandle _first;
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

    private void OnFlushCancelled(CancellationToken token)
    {
        AwaiterCompletion completion = default;
        bool postUnborrow = false;
        lock (_sync)
        {
            if (!_flush.IsWaiting || _flush.Token != token)
            {
                return;
            }
            if (_borrowing)
            {
                postUnborrow = RequestUnborrow(new OperationCanceledException(token));
            }
            else
            {
                completion = _flush.Complete(default, new OperationCanceledException(token), _inlineContinuations);
                completion.Registration = default; // this is its callback: nothing to unregister
            }
        }
        PostUnborrow(postUnborrow);
        completion.Run();
    }

    /// <summary>
    /// Under the lock: the waiting borrowed write was cancelled. The kernel may be reading the caller's memory, so the
    /// sender ends that (<see cref="ConnectionSender.OnUnborrowRequested"/>) and the next <see cref="TryTake"/> copies what
    /// is left and completes the write with <paramref name="error"/> (null: IsCanceled).
    /// </summary>
    /// <returns>True when the sender is to be told (<see cref="PostUnborrow"/>, outside the lock).</returns>
    private bool RequestUnborrow(Exception? error)
    {
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

    // ---- Sender side: the loop thread ----

    /// <summary>
    /// What the sender is to do: <see cref="OutputTake.Bytes"/> (<paramref name="bytes"/> to send, which stay in place
    /// until <see cref="Consume"/>), <see cref="OutputTake.Completed"/> (the writer completed and everything is sent;
    /// <paramref name="writerError"/> when it completed with one, unsent bytes or not), or <see cref="OutputTake.Waiting"/>
    /// (nothing yet: the next flush posts <see cref="ConnectionSender.OnOutputFlushed"/>).
    /// </summary>
    /// <param name="bytes">What to send (with <see cref="OutputTake.Bytes"/>).</param>
    /// <param name="writerError">The writer's error (with <see cref="OutputTake.Completed"/>).</param>
    /// <param name="completion">A cancelled borrowed write's completion (its unsent rest copied here): the sender runs it
    /// once it has submitted <paramref name="bytes"/> (an inline continuation may close the connection).</param>
    public OutputTake TryTake(out Sendable bytes, out Exception? writerError, out AwaiterCompletion completion)
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
            if (_writerCompleted && (writerError is not null || _committed == _sent))
            {
                bytes = default;
                take = OutputTake.Completed;
            }
            else if (_committed > _sent)
            {
                bytes = new Sendable(_head!, _headIndex, _committed - _sent, _borrowing);
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

    /// <summary>A borrowed write was cancelled and no send is in flight (the sender asks before it takes bytes).</summary>
    public bool UnborrowRequested => Volatile.Read(ref _unborrowRequested);

    /// <summary>
    /// Bytes this output holds for the peer, under the lock: unsent, and sent zero-copy but still pinned until the peer
    /// acknowledges them. Flushes wait on both, so a peer that stops reading holds MaxWriteBufferSize whichever way the
    /// bytes went (on copying sends the socket's buffer is the kernel's memory; on zero-copy ones it is ours).
    /// </summary>
    private long Held => _committed - _sent + _pinnedBySender;

    /// <summary>
    /// The kernel sent <paramref name="bytes"/> (of those <see cref="TryTake"/> gave): their blocks go back (once unpinned);
    /// a waiting flush may go on. <paramref name="pinnedUntilNotification"/>: a zero-copy send's, held until
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

    /// <summary>A zero-copy send's notification came: the <paramref name="bytes"/> it had sent no longer hold memory.</summary>
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

    /// <summary>Under the lock: completes a waiting flush once a borrowed write is all sent, or the bytes held fell below the resume threshold.</summary>
    private AwaiterCompletion ResumeIfCaughtUp()
    {
        if (_flush.IsWaiting && !_senderCompleted && (_borrowing ? _sent >= _borrowedEnd : Held < _resumeThreshold))
        {
            EndBorrowing(); // its segments went back with ReleaseSent: all of it is sent
            return _flush.Complete(new FlushResult(isCanceled: false, isCompleted: false), null, _inlineContinuations);
        }
        return default;
    }

    /// <summary>
    /// The sender is gone (closing, the peer gone, a send error): unsent bytes are dropped and flushes return IsCompleted
    /// from now on, or throw <paramref name="error"/>.
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
                completion = _flush.Complete(new FlushResult(isCanceled: false, isCompleted: error is null), error, _inlineContinuations);
            }
        }
        completion.Run();
    }

    /// <summary>
    /// Under the lock, on the loop thread with no send in flight: the cancelled borrowed write's unsent bytes are copied
    /// into blocks of the output's own, which take its segment's place, and the write completes as cancelled.
    /// </summary>
    private AwaiterCompletion Unborrow()
    {
        _unborrowRequested = false;
        Exception? error = _unborrowError;
        _unborrowError = null;
        if (!_borrowing)
        {
            return default; // it completed (all sent) or the sender is gone
        }
        // The borrowed write's segments follow each other at the end of the chain (the writer waits; anything it
        // wrote meanwhile comes after them).
        Segment? previous = null;
        Segment first = _head!;
        while (!first.IsBorrowed)
        {
            previous = first;
            first = first.Next!;
        }
        Segment? after = first;
        while (after is { IsBorrowed: true })
        {
            after = after.Next;
        }
        Segment? copies = null;
        Segment? last = null;
        int from = previous is null ? _headIndex : 0;
        long start = first.RunningIndex + from; // the stream offset of the first unsent borrowed byte
        Segment? block = null;
        for (Segment? borrowed = first; borrowed != after; borrowed = borrowed.Next)
        {
            ReadOnlySpan<byte> rest = borrowed!.Memory.Span.Slice(from, borrowed.Committed - from);
            from = 0;
            while (!rest.IsEmpty)
            {
                if (block is null || block.Written == block.Memory.Length)
                {
                    block = _segments.Rent();
                    long runningIndex = last is null ? start : last.RunningIndex + last.Written;
                    block.Rent(_pool, Math.Max(_minimumSegment, Math.Min(_pool.MaxBufferSize, (int)Math.Min(int.MaxValue, _borrowedEnd - runningIndex))), runningIndex);
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
        return _flush.Complete(new FlushResult(isCanceled: error is null, isCompleted: false), error, _inlineContinuations);
    }

    // ---- Shared, under _sync ----

    /// <summary>No borrowed write waits any more (all of it sent, or the sender gone): a cancel that came too late is dropped.</summary>
    private void EndBorrowing()
    {
        _borrowing = false;
        _unborrowRequested = false;
        _unborrowError = null;
    }

    /// <summary>Gives back the segments from <paramref name="first"/> up to (not including) <paramref name="end"/>.</summary>
    private void ReturnSegments(Segment? first, Segment? end)
    {
        for (Segment? segment = first; segment != end;)
        {
            Segment? next = segment!.Next;
            segment.Release();
            _segments.Return(segment);
            segment = next;
        }
    }

    // Gives back every block all of whose bytes are sent: the last one too unless the writer is writing in it, so a
    // connection with nothing to send holds no memory.
    private void ReleaseSent()
    {
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

    void IValueTaskSource<FlushResult>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _flush.OnCompleted(_sync, continuation, state, token, flags, _inlineContinuations);

    /// <summary>What <see cref="TryTake"/> gives the sender.</summary>
    public enum OutputTake
    {
        Waiting,
        Bytes,
        Completed,
    }

    /// <summary>
    /// Flushed bytes to send, in place in the output's blocks: <see cref="Length"/> bytes from the head block's
    /// <c>headIndex</c> on. Valid on the loop thread until the next <see cref="Consume"/>: every block before the last
    /// is complete (the writer moved on from it), and the last one's bytes up to here were committed, so nothing this
    /// reads changes under it.
    /// </summary>
    public readonly struct Sendable(Segment head, int headIndex, long length, bool borrowed)
    {
        public long Length => length;

        /// <summary>Some of the bytes are a caller's memory (a borrowed write): never sent zero-copy, as the write completes
        /// at the send's result, before a notification would say the kernel is done with the pages.</summary>
        public bool Borrowed => borrowed;

        public bool IsSingleSegment => head.Committed - headIndex >= length;

        public Enumerator GetEnumerator() => new(head, headIndex, length);

        public struct Enumerator(Segment head, int headIndex, long length)
        {
            private Segment? _next = head;
            private int _start = headIndex;
            private long _remaining = length;

            public ReadOnlyMemory<byte> Current { get; private set; }

            public bool MoveNext()
            {
                if (_remaining == 0 || _next is not { } segment)
                {
                    return false;
                }
                int count = (int)Math.Min(segment.Committed - _start, _remaining);
                Current = segment.Memory.Slice(_start, count);
                _remaining -= count;
                _start = 0;
                _next = _remaining == 0 ? null : segment.Next; // not past the last: the writer may be linking its next
                return true;
            }
        }
    }

    /// <summary>One block of the output: bytes [0, Written) written, [0, Committed) of them flushed.</summary>
    public sealed class Segment
    {
        private IMemoryOwner<byte>? _owner; // a pool's block
        private byte[]? _array;             // or, for a write larger than the pool's blocks, an ArrayPool array

        /// <summary>The memory is a caller's (a borrowed write): never written to, given back to no pool.</summary>
        public bool IsBorrowed { get; private set; }

        public Memory<byte> Memory { get; private set; }

        /// <summary>The stream offset of the block's first byte.</summary>
        public long RunningIndex { get; private set; }

        /// <summary>Bytes written (by the writer; final once it moved on to the next block).</summary>
        public int Written { get; set; }

        /// <summary>Bytes flushed (set under the lock at each commit).</summary>
        public int Committed { get; set; }

        public Segment? Next { get; set; }

        public void Rent(MemoryPool<byte> pool, int minimumSize, long runningIndex)
        {
            if (minimumSize <= pool.MaxBufferSize)
            {
                _owner = pool.Rent(minimumSize);
                Memory = _owner.Memory;
            }
            else
            {
                _array = ArrayPool<byte>.Shared.Rent(minimumSize);
                Memory = _array;
            }
            RunningIndex = runningIndex;
            Written = 0;
            Committed = 0;
        }

        /// <summary>Holds a caller's bytes, all of them written and committed (its place in the stream set when linked).</summary>
        public void Borrow(ReadOnlyMemory<byte> source)
        {
            Memory = MemoryMarshal.AsMemory(source); // only ever read: the sender sends from it
            IsBorrowed = true;
            Written = source.Length;
            Committed = source.Length;
        }

        public void SetRunningIndex(long runningIndex) => RunningIndex = runningIndex;

        /// <summary>Gives the block back (a pinned pool block goes back to its pool only once unpinned: zero-copy sends).</summary>
        public void Release()
        {
            IsBorrowed = false;
            _owner?.Dispose();
            if (_array is not null)
            {
                ArrayPool<byte>.Shared.Return(_array);
            }
            _owner = null;
            _array = null;
            Memory = default;
            Next = null;
        }
    }

    /// <summary>
    /// Segment objects shared by a network's outputs, so a connection's writes allocate none once warm (they never reach
    /// the application: only the sender reads them). A stack under its own lock, taken inside an output's; it grows to
    /// the most segments held at once (64 connections each with 1 MiB unsent hold 4,096), up to <see cref="Capacity"/>
    /// (~1 MB of segment objects); past that they are left to the GC.
    /// </summary>
    public sealed class SegmentPool
    {
        private const int Capacity = 16 * 1024;
        private readonly Lock _lock = new();
        private readonly Stack<Segment> _free = new();

        public Segment Rent()
        {
            lock (_lock)
            {
                if (_free.TryPop(out Segment? segment))
                {
                    return segment;
                }
            }
            return new Segment();
        }

        public void Return(Segment segment)
        {
            lock (_lock)
            {
                if (_free.Count < Capacity)
                {
                    _free.Push(segment);
                }
            }
        }
    }
}
