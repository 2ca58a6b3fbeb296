using System.Collections.Concurrent;

namespace IoUring.Buffers;

/// <summary>
/// Spare receive blocks of one loop's buffer ring: a connection's Input keeps the ring buffers it was handed (no copy)
/// and the ring gets one of these in their place; the Input gives each block back here once its reader consumed it.
/// </summary>
/// <remarks>
/// The loop thread rents; any thread returns. Once a second, at a rent, the blocks above <c>maxIdle</c> that stayed
/// idle all that second go to the GC: a steady load keeps its working set, a burst's surplus goes in about two
/// seconds.
/// </remarks>
internal sealed class ReceiveBlockPool(int blockSize, int maxIdle, bool poisonReturned = false,
    string? origin = null)
{
    internal const byte PoisonByte = 0xDD;

    private readonly BlockLedger? _ledger = PoolDiagnostics.Enabled
        ? new BlockLedger($"receive blocks of {blockSize} B", PoisonByte, origin)
        : null;
    private readonly Stack<ReceiveBlock> _free = new();
    private readonly ConcurrentQueue<ReceiveBlock> _returned = new();
    private int _queued;    // blocks in _returned (Interlocked)
    private long _rents;    // loop thread
    private long _returns;  // any thread (Interlocked)
    private long _peakHeld; // loop thread
    private long _dropped;  // loop thread
    private long _nextTrim; // loop thread: Environment.TickCount64 of the next trim check
    private int _lowIdle = int.MaxValue; // loop thread: the fewest idle blocks seen since the last check

    public int BlockSize { get; } = blockSize;

    public long Allocated { get; private set; }

    /// <summary>Held by Inputs or idle here.</summary>
    public long RetainedBlocks => Allocated - Volatile.Read(ref _dropped);

    /// <summary>Rented and not returned. Any thread; a snapshot.</summary>
    public long HeldBlocks => Volatile.Read(ref _rents) - Volatile.Read(ref _returns);

    public long PeakHeldBlocks => Volatile.Read(ref _peakHeld);

    /// <summary>Tests; racy against the loop, as a test's snapshot is.</summary>
    public void ResetPeak() => Volatile.Write(ref _peakHeld, HeldBlocks);

    /// <summary>Test seam: while positive, a rent throws <see cref="OutOfMemoryException"/>.</summary>
    internal int FailRents { get; set; }

    /// <summary>Loop thread only.</summary>
    public ReceiveBlock Rent()
    {
        if (FailRents > 0)
        {
            FailRents--;
            throw new OutOfMemoryException("A receive block could not be allocated (injected by a test).");
        }
        if (!_free.TryPop(out ReceiveBlock block))
        {
            TakeReturned();
            if (!_free.TryPop(out block))
            {
                block = new ReceiveBlock(GC.AllocateUninitializedArray<byte>(BlockSize, pinned: true), 0);
                Allocated++;
            }
        }
        int idle = _free.Count + Volatile.Read(ref _queued);
        _lowIdle = Math.Min(_lowIdle, idle);
        if (Environment.TickCount64 >= _nextTrim)
        {
            Trim();
        }
        Volatile.Write(ref _rents, _rents + 1);
        long held = _rents - Volatile.Read(ref _returns);
        if (held > _peakHeld)
        {
            Volatile.Write(ref _peakHeld, held);
        }
        if (PoolDiagnostics.Enabled)
        {
            _ledger!.OnRent(block.Array, block.Offset, block.Array.AsSpan(block.Offset, BlockSize));
        }
        return block;
    }

    internal BlockLedger? Ledger => _ledger;

    /// <summary>Loop thread: <paramref name="given"/> replaced <paramref name="taken"/> in the buffer ring; the caller
    /// returns <paramref name="taken"/> here.</summary>
    public void OnExchanged(ReceiveBlock given, ReceiveBlock taken)
    {
        if (PoolDiagnostics.Enabled)
        {
            _ledger!.OnExchanged(given.Array, given.Offset, taken.Array, taken.Offset);
        }
    }

    public void OnStopped()
    {
        if (PoolDiagnostics.Enabled)
        {
            _ledger!.OnStopped();
        }
    }

    /// <summary>Any thread; the caller no longer reads the block.</summary>
    public void Return(ReceiveBlock block)
    {
        if (PoolDiagnostics.Enabled && !_ledger!.OnReturn(block.Array, block.Offset,
            block.Array.AsSpan(block.Offset, BlockSize)))
        {
            return; // returned twice: reported, and kept out of the pool
        }
        if (poisonReturned)
        {
            // a reader that kept it reads garbage, visibly
            block.Array.AsSpan(block.Offset, BlockSize).Fill(PoisonByte);
        }
        Interlocked.Increment(ref _returns);
        Interlocked.Increment(ref _queued);
        _returned.Enqueue(block);
    }

    private void TakeReturned()
    {
        while (_returned.TryDequeue(out ReceiveBlock block))
        {
            Interlocked.Decrement(ref _queued);
            _free.Push(block);
        }
    }

    // Drops the idle blocks above maxIdle the last second never needed.
    private void Trim()
    {
        _nextTrim = Environment.TickCount64 + 1000;
        int surplus = _lowIdle == int.MaxValue ? 0 : _lowIdle - maxIdle;
        _lowIdle = int.MaxValue;
        if (surplus <= 0)
        {
            return;
        }
        TakeReturned();
        for (int i = 0; i < surplus && _free.TryPop(out ReceiveBlock block); i++)
        {
            _dropped++;
            if (PoolDiagnostics.Enabled)
            {
                _ledger!.Forget(block.Array, block.Offset);
            }
        }
    }
}
