using System.Collections.Concurrent;
using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>
/// Spare receive blocks of one loop's buffer ring: a connection's Input keeps the ring buffers it was handed (no copy)
/// and the ring gets one of these in their place; the Input gives each block back here once its reader consumed it.
/// </summary>
/// <remarks>
/// The loop thread rents (from its own stack, refilled from what readers gave back); any thread returns. Blocks are
/// slices of pinned slabs allocated on demand and never freed while the loop lives: the pool grows to the most blocks
/// the loop's Inputs held at once (each Input is held to its pause threshold by backpressure), and the garbage
/// collector takes it all after the loop and every reader are gone.
/// </remarks>
internal sealed class ReceiveBlockPool(int blockSize, bool poisonReturned = false)
{
    private const int BlocksPerSlab = 16;
    private readonly Stack<ReceiveBlock> _free = new();
    private readonly ConcurrentQueue<ReceiveBlock> _returned = new();

    public int BlockSize { get; } = blockSize;

    private long _rents;    // loop thread
    private long _returns;  // any thread (Interlocked)
    private long _peakHeld; // loop thread

    /// <summary>Blocks allocated so far (tests and diagnostics).</summary>
    public int Allocated { get; private set; }

    /// <summary>Blocks rented and not returned: what connections' Inputs hold (the ring's own are not counted). Any thread; a snapshot.</summary>
    public long HeldBlocks => Volatile.Read(ref _rents) - Volatile.Read(ref _returns);

    /// <summary>The most <see cref="HeldBlocks"/> seen at a rent since <see cref="ResetPeak"/> (tests).</summary>
    public long PeakHeldBlocks => Volatile.Read(ref _peakHeld);

    /// <summary>Starts a new peak from now (tests; racy against the loop, as a test's snapshot is).</summary>
    public void ResetPeak() => Volatile.Write(ref _peakHeld, HeldBlocks);

    /// <summary>Test seam: while positive, each rent throws <see cref="OutOfMemoryException"/> (as a failed allocation would). Loop thread.</summary>
    internal int FailRents { get; set; }

    /// <summary>A block of <see cref="BlockSize"/> bytes. Loop thread only.</summary>
    public ReceiveBlock Rent()
    {
        if (FailRents > 0)
        {
            FailRents--;
            throw new OutOfMemoryException("A receive block could not be allocated (injected by a test).");
        }
        Volatile.Write(ref _rents, _rents + 1);
        long held = _rents - Volatile.Read(ref _returns);
        if (held > _peakHeld)
        {
            Volatile.Write(ref _peakHeld, held);
        }
        if (_free.TryPop(out ReceiveBlock block))
        {
            return block;
        }
        while (_returned.TryDequeue(out block))
        {
            _free.Push(block);
        }
        if (_free.TryPop(out block))
        {
            return block;
        }
        byte[] slab = GC.AllocateUninitializedArray<byte>(BlockSize * BlocksPerSlab, pinned: true);
        for (int i = 1; i < BlocksPerSlab; i++)
        {
            _free.Push(new ReceiveBlock(slab, i * BlockSize));
        }
        Allocated += BlocksPerSlab;
        return new ReceiveBlock(slab, 0);
    }

    /// <summary>Gives a block back. Any thread; the caller no longer reads it.</summary>
    public void Return(ReceiveBlock block)
    {
        if (poisonReturned)
        {
            block.Array.AsSpan(block.Offset, BlockSize).Fill(0xDD); // a reader that kept it reads garbage, visibly
        }
        _returned.Enqueue(block);
        Interlocked.Increment(ref _returns);
    }
}
