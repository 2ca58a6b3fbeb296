using System.Buffers;
using System.IO.Pipelines;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Buffers;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A connection's <see cref="IoUringConnection.Output"/>: a <see cref="PipeWriter"/> whose flushed bytes the
/// connection's <see cref="ConnectionSender"/> sends from the very blocks they were written to, then gives back.
/// </summary>
/// <remarks>
/// <para>The contract is <see cref="Pipe"/>'s writer's: bytes written (GetMemory/GetSpan, Advance) are sent only once
/// flushed (or at Complete, which commits them too); a flush waits while the unsent bytes are at least the pause
/// threshold (MaxWriteBufferSize) until the sender brings them below the resume threshold (half of it);
/// CancelPendingFlush ends the waiting flush, or the next one, with IsCanceled; once the sender is gone (the connection
/// closed, the peer reset or stopped reading) flushes return IsCompleted, or throw the send error that ended it, and
/// unsent bytes are dropped. Completing with an exception fails the connection (abortive close) instead of sending what
/// is left. As with a pipe, a flush while another waits joins it, and a flush after Complete returns (no error). One
/// difference: a pipe pauses only when a commit crosses the threshold, so after a cancelled flush its next flush
/// returns at once while the unsent bytes are still above it; here every flush waits while they are at or above the
/// threshold.</para>
/// <para>Threads (docs/architecture.md, "Threads and locks"): the writer side (.Writer, .Borrowing, .CallerSend) on the
/// application's threads, the sender side (.Sender) on the loop; one lock, never held by a flush continuation.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionOutput : PipeWriter, IValueTaskSource<FlushResult>
{
    /// <summary>The smallest write sent from the caller's memory (below it a copy costs less than the wait).</summary>
    internal const int MinimumBorrow = 32 * 1024;

    /// <summary>The most bytes a flush sends from its own thread (<see cref="SendFromCaller"/>); more go through the
    /// ring.</summary>
    internal const int MaxCallerSend = 64 * 1024;
    internal const int MaxCallerSendSegments = 8;

    private static readonly Action<object?> s_onFlushed = static s => ((ConnectionSender)s!).OnOutputFlushed();
    private static readonly Action<object?> s_onCallerSendFailed =
        static s => ((ConnectionSender)s!).OnCallerSendFailed();
    private static readonly Action<object?> s_onUnborrowRequested =
        static s => ((ConnectionSender)s!).OnUnborrowRequested();
    private static readonly Action<object?, CancellationToken> s_onFlushCancelled =
        static (o, token) => ((ConnectionOutput)o!).OnFlushCancelled(token);

    // an internal object of the connection locked by nothing else (no lock object per connection)
    private readonly object _sync;
    private readonly EventLoop _loop;
    private readonly MemoryPool<byte> _pool;
    private readonly OutputSegmentPool _segments;
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
    private OutputSegment? _head;           // the oldest unsent bytes' block (null: nothing held)
    private int _headIndex;
    private OutputSegment? _tail;           // the block the writer writes in
    // the tail at the last commit: blocks before it are all committed (null: from _head)
    private OutputSegment? _commitFrom;
    private long _committed;          // bytes flushed since the start: the sender may send up to here
    private long _sent;               // bytes the sender is done with (or dropped)
    private long _pinnedBySender;     // of _sent, bytes zero-copy sends still pin until their notifications
    private bool _senderWaiting;      // the sender found nothing to send: the next commit posts it
    private Waiter<FlushResult> _flush; // a flush waiting for the sender to catch up (mutable struct: never readonly)
    private bool _cancelNextFlush;    // CancelPendingFlush with no flush waiting
    // the waiting flush is a WriteAsync whose caller's memory a segment holds (one, until _borrowedEnd is sent)
    private bool _borrowing;
    private long _borrowedEnd;
    // that write was cancelled: the sender copies what is left once no send is in flight
    private bool _unborrowRequested;
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
    /// <param name="fd">The connection's socket: it stays open until the sender has completed
    /// (<see cref="CompleteSender"/>).</param>
    /// <param name="callerSendLimit">The most flushed bytes a flush sends from its own thread while the sender may send
    /// them zero-copy, 0 for never (see <see cref="SendFromCaller"/>).</param>
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
        // A write that reaches the pause threshold waits for the sender anyway, so waiting until all of it is sent
        // costs the caller little and saves copying it; without a threshold flushes never wait, so writes are always
        // copied.
        _borrowThreshold = pauseThreshold > 0 ? Math.Max(pauseThreshold, MinimumBorrow) : long.MaxValue;
        // As a pipe's minimum segment size: the blocks of ours and Kestrel's pools whatever is asked for, and no tiny
        // buffers from a pool that gives what is asked for (MemoryPool<byte>.Shared).
        _minimumSegment = Math.Min(PinnedBlockMemoryPool.BlockSize, pool.MaxBufferSize);
        _inlineContinuations = inlineContinuations;
    }

    /// <summary>The sender this output feeds and the connection's input (set once, before the connection
    /// starts).</summary>
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

    /// <summary>Sends by flushing threads that left bytes to the ring: the socket's buffer was full (EAGAIN, a partial
    /// send), or the bytes were in more than <see cref="MaxCallerSendSegments"/> pieces (tests).</summary>
    internal int CallerSendsCutShort => Volatile.Read(ref _callerSendsCutShort);

    /// <summary>Blocks held (tests).</summary>
    internal int HeldBlocks
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

    // ---- Shared, under _sync ----

    /// <summary>Gives back the segments from <paramref name="first"/> up to (not including)
    /// <paramref name="end"/>.</summary>
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
}
