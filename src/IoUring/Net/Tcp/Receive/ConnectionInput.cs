using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Buffers;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A connection's <see cref="IoUringConnection.Input"/>: a <see cref="PipeReader"/> over the loop's receive buffers.
/// A ring buffer filled at least half is kept (<see cref="ReceiveBuffers.Take"/>); smaller receives are copied onto
/// the last block, so a trickle of them cannot hold a block each.
/// </summary>
/// <remarks>
/// <para>The contract and backpressure are <see cref="Pipe"/>'s reader's (pause at the threshold, resume below
/// half).</para>
/// <para>The writer side (this file) runs on the loop, the reader side (.Reader, .CopyTo) on the application's threads;
/// one lock, never held by a read continuation.</para>
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
    private InputSegment? _head;          // the oldest unconsumed bytes' block (null: nothing held)
    private int _headIndex;
    private InputSegment? _tail;          // the newest block, still written to while it has room
    private InputSegment? _spareSegments; // released segment objects, reused
    private long _written;                // bytes appended since the start
    private long _consumed;               // bytes the reader consumed since the start
    private long _examined;               // how far the reader examined: a read waits for bytes past it
    private InputReadState _readState;
    private Waiter<ReadResult> _read;     // mutable struct: never readonly
    private int _pendingMinimum;          // that read's minimumSize (ReadAtLeastAsync), 0 for ReadAsync
    private bool _cancelNextRead;         // CancelPendingRead with no read waiting
    private bool _writerCompleted;
    private Exception? _writerError;
    private bool _readerCompleted;
    private bool _writerPaused;           // Write said pause, and the receiver has not been told to resume since
    private bool _lent;                   // a CopyToAsync to an Output lends the blocks: Complete keeps them
    private long _copyingEnd;             // the offset up to which that copy's write lends (read by MayHaveUnconsumed)

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

    /// <summary>Unconsumed bytes past what a CopyToAsync is writing out (pipelined requests). A lock-free
    /// hint.</summary>
    internal bool MayHaveUnconsumed
        => Volatile.Read(ref _written) > Math.Max(Volatile.Read(ref _consumed), Volatile.Read(ref _copyingEnd));

    /// <summary>Memory held for the unconsumed bytes (tests).</summary>
    internal long HeldBytes
    {
        get
        {
            lock (_sync)
            {
                long blocks = 0;
                for (InputSegment? segment = _head; segment is not null; segment = (InputSegment?)segment.Next)
                {
                    blocks++;
                }
                return blocks * _blockSize;
            }
        }
    }

    /// <summary>The backlog has not fallen below the resume threshold since the pause.</summary>
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
    /// <paramref name="moreFollows"/>: the next completion brings more at once, so a waiting read waits for it, up to
    /// <see cref="MaxHeldForMore"/> unconsumed bytes (or until <see cref="WakeReader"/>).
    /// </summary>
    public InputWrite Write(ReceivedBytes data, bool moreFollows = false)
    {
        Debug.Assert(_loop.IsOnLoopThread, "Input written off the loop thread");
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

    /// <summary>As <see cref="Write"/> for a vectored RECVMSG; blocks not kept go back to the spares, whatever the
    /// outcome.</summary>
    public InputWrite WriteBlocks(ReadOnlySpan<ReceiveBlock> blocks, ReadOnlySpan<int> lengths, int length,
        bool moreFollows)
    {
        Debug.Assert(_loop.IsOnLoopThread, "Input written off the loop thread");
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

    // Returns whether the writer is paused.
    private bool AfterAppend(bool moreFollows, ref AwaiterCompletion completion)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        long backlog = _written - _consumed;
        if (_pauseThreshold > 0 && backlog >= _pauseThreshold && backlog >= _pendingMinimum)
        {
            _writerPaused = true;
        }
        if (_read.IsWaiting && CanCompleteRead(_pendingMinimum)
            && !(moreFollows && !_writerPaused && backlog < MaxHeldForMore))
        {
            completion = CompletePendingRead(canceled: false, error: null);
        }
        return _writerPaused;
    }

    /// <summary>Completes a read <see cref="Write"/> left waiting for more.</summary>
    public void WakeReader()
    {
        Debug.Assert(_loop.IsOnLoopThread, "a read woken for more off the loop thread");
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

    /// <summary>The peer's FIN (<paramref name="error"/> null) or a failure every read throws. The first stands, as a
    /// pipe's: an abort after the FIN leaves the bytes before it readable.</summary>
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
            DropUnreadable();
        }
        completion.Run();
    }

    // ---- The blocks, under _sync ----

    private void Append(ReadOnlySpan<byte> bytes, ushort bufferId)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (bytes.Length < _blockSize / 2)
        {
            AppendCopy(bytes);
            return;
        }
        // Keep the ring's buffer; a spare takes its place.
        AppendSegment(_buffers.Take(bufferId)).SetEnd(bytes.Length);
        _written += bytes.Length;
    }

    private void AppendCopy(ReadOnlySpan<byte> bytes)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        InputSegment? tail = _tail;
        if (tail is null || _blockSize - tail.End < bytes.Length)
        {
            tail = AppendSegment(_buffers.Spares.Rent());
        }
        bytes.CopyTo(tail.Block.Array.AsSpan(tail.Block.Offset + tail.End));
        tail.SetEnd(tail.End + bytes.Length);
        _written += bytes.Length;
    }

    private InputSegment AppendSegment(ReceiveBlock block)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        InputSegment segment = _spareSegments ?? new InputSegment();
        _spareSegments = (InputSegment?)segment.Next;
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

    // The last block goes too: an idle connection holds no memory.
    private void ReleaseConsumed()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        Debug.Assert(_consumed <= _written, "consumed past the bytes written");
        while (_head is { } head && head.RunningIndex + head.End <= _consumed
            && (head != _tail || _consumed == _written))
        {
            _head = (InputSegment?)head.Next;
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

    // Once the writer failed every read throws, so the blocks go back as soon as no result the reader holds shows them
    // (InputTests.A_failed_connection_gives_back_the_blocks_...).
    private void DropUnreadable()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (_writerError is not null && _readState == InputReadState.None && !_lent && _head is not null)
        {
            _consumed = _written;
            ReleaseConsumed();
        }
    }
}
