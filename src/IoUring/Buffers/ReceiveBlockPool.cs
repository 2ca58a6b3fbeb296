using System.Collections.Concurrent;

namespace IoUring.Buffers;

/// <summary>
/// Spare receive blocks of one loop's buffer ring: a connection's Input keeps the ring buffers it was handed (no copy)
/// and the ring gets one of these in their place; the Input gives each block back here once its reader consumed it.
/// </summary>
/// <remarks>
/// The loop thread rents (from its own stack, refilled from what readers gave back); any thread returns. Each block
/// is a pinned array of its own. At a rent at least a second after the last check, if the idle blocks never fell
/// below <c>maxIdle</c> during that second, the surplus is dropped to the GC: a steady load keeps its working set, and
/// after a burst the pool shrinks back within about two seconds of rents.
/// </remarks>
internal sealed class ReceiveBlockPool(int blockSize, int maxIdle, bool poisonReturned = false,
    string? origin = null)
{
    /// <summary>What returned blocks are filled with when poisoned.</summary>
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

    /// <summary>Blocks allocated so far (tests and diagnostics).</summary>
    public long Allocated { get; private set; }

    /// <summary>Blocks allocated and not dropped: held by Inputs or idle here.</summary>
    public long RetainedBlocks => Allocated - Volatile.Read(ref _dropped);

    /// <summary>Blocks rented and not returned (what Inputs hold). Any thread; a snapshot.</summary>
    public long HeldBlocks => Volatile.Read(ref _rents) - Volatile.Read(ref _returns);

    /// <summary>The most <see cref="HeldBlocks"/> seen at a rent since <see cref="ResetPeak"/> (tests).</summary>
    public long PeakHeldBlocks => Volatile.Read(ref _peakHeld);

    /// <summary>Starts a new peak from now (tests; racy against the loop, as a test's snapshot is).</summary>
    public void ResetPeak() => Volatile.Write(ref _peakHeld, HeldBlocks);

    /// <summary>Test seam: while positive, each rent throws <see cref="OutOfMemoryException"/>.</summary>
    internal int FailRents { get; set; }

    /// <summary>A block of <see cref="BlockSize"/> bytes. Loop thread only.</summary>
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

    /// <summary>This pool's record of its blocks under <see cref="PoolDiagnostics"/> (null when off).</summary>
    internal BlockLedger? Ledger => _ledger;

    /// <summary>A block just rented went into the buffer ring in place of <paramref name="taken"/>, which its caller
    /// now holds and returns here (loop thread).</summary>
    public void OnExchanged(ReceiveBlock given, ReceiveBlock taken)
    {
        if (PoolDiagnostics.Enabled)
        {
            _ledger!.OnExchanged(given.Array, given.Offset, taken.Array, taken.Offset);
        }
    }

    /// <summary>Its loop stopped: under <see cref="PoolDiagnostics"/>, the blocks still out must come back.</summary>
    public void OnStopped()
    {
        if (PoolDiagnostics.Enabled)
        {
            _ledger!.OnStopped();
        }
    }

    /// <summary>Gives a block back. Any thread; the caller no longer reads it.</summary>
    public void Return(ReceiveBlock block)
    {
        if (PoolDiagnostics.Enabled && !_ledger!.OnReturn(block.Array, block.Offset,
            block.Array.AsSpan(block.Offset, BlockSize)))
        {
            return; // returned twice: reported, and kept out of the pool (two renters would share it)
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

    // Drops the idle blocks the last second never needed (more than maxIdle were idle all along).
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
