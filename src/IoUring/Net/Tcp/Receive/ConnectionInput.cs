using System.IO.Pipelines;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A connection's <see cref="IoUringConnection.Input"/>: a <see cref="PipeReader"/> over the loop's receive buffers
/// themselves. A ring buffer the kernel filled at least half is kept as it is (the ring gets a spare block in its
/// place, <see cref="ReceiveBuffers.Take"/>), so bulk bytes are never copied in user space; smaller receives are copied
/// onto the end of the last block, so a trickle of small receives cannot hold a block each. Blocks go back to the
/// loop's spares as the reader consumes them.
/// </summary>
/// <remarks>
/// <para>The contract is <see cref="Pipe"/>'s reader's: a read completes when there are bytes the reader has not
/// examined (at least <c>minimumSize</c> unconsumed ones for ReadAtLeastAsync), when the writer completed (its error
/// is thrown by every read from then on), or when cancelled; one read at a time, each followed by one AdvanceTo.
/// Backpressure is the pipe's too: once the unconsumed bytes reach the pause threshold, <see cref="Write"/> says so and
/// the receiver stops receiving; when the reader brings them below the resume threshold (half of it), the receiver is
/// told on the loop (<see cref="ConnectionReceiver.OnInputResumed"/>).</para>
/// <para>Threads (docs/architecture.md, "Threads and locks"): the writer side (.Writer) on the loop, the reader side
/// (.Reader, .CopyTo) on the application's; one lock, never held by a read continuation.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionInput : PipeReader, IValueTaskSource<ReadResult>
{
    private static readonly Action<object?> s_onResumed = static r => ((ConnectionReceiver)r!).OnInputResumed();
    private static readonly Action<object?> s_onReaderGone = static r => ((ConnectionReceiver)r!).OnInputReaderGone();
    private static readonly Action<object?, CancellationToken> s_onReadCancelled =
        static (i, token) => ((ConnectionInput)i!).OnReadCancelled(token);

    /// <summary>Unconsumed bytes up to which <see cref="Write"/> leaves a waiting read waiting when more follows at
    /// once.</summary>
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
    // a CopyToAsync to an Output runs (it lends each result's blocks): Complete keeps them until it ends
    private bool _lent;
    // the stream offset up to which that copy's current write lends (the reader's; read by MayHaveUnconsumed)
    private long _copyingEnd;

    public ConnectionInput(ConnectionReceiver receiver, EventLoop loop, long pauseThreshold, bool inlineContinuations)
    {
        _receiver = receiver;
        _sync = receiver;
        _loop = loop;
        _buffers = loop.ReceiveBuffers;
        _blockSize = _buffers.BufferSize;
        _pauseThreshold = pauseThreshold;
        // at least 1, or receiving could never resume
        _resumeThreshold = pauseThreshold > 0 ? Math.Max(1, pauseThreshold / 2) : 0;
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
    internal bool MayHaveUnconsumed
        => Volatile.Read(ref _written) > Math.Max(Volatile.Read(ref _consumed), Volatile.Read(ref _copyingEnd));

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

    /// <summary>Whether receiving must stay paused (the reader has not brought the backlog below the resume
    /// threshold).</summary>
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
}
