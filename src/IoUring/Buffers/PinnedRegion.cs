using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Buffers;

/// <summary>
/// One region of a <see cref="PinnedBlockMemoryPool"/>: <see cref="Length"/> bytes of blocks in one pinned array, page
/// aligned so a registration pins (and madvise releases) whole pages of its own. <see cref="BufferIndex"/> is its entry
/// in the registrar's ring's buffer table.
/// </summary>
internal sealed unsafe class PinnedRegion
{
    // The system's page size (16 or 64 KiB on some arm64 kernels).
    private static readonly int s_pageSize = Environment.SystemPageSize;

    private readonly byte[] _array; // reachable from every block (through Region): their pointers are into it
    private readonly PinnedBlock[] _free; // a stack

    public PinnedRegion(PinnedBlockMemoryPool pool)
    {
        Pool = pool;
        _array = GC.AllocateUninitializedArray<byte>(Length + s_pageSize, pinned: true);
        // On the pinned object heap: the address is stable for the array's whole life.
        nuint address = (nuint)Unsafe.AsPointer(ref MemoryMarshal.GetArrayDataReference(_array));
        Start = (byte*)((address + (nuint)s_pageSize - 1) & ~(nuint)(s_pageSize - 1));
        _free = new PinnedBlock[pool.BlocksPerRegion];
        for (int i = 0; i < _free.Length; i++)
        {
            _free[i] = new PinnedBlock(this, Start + (_free.Length - 1 - i) * pool.BlockBytes); // first block on top
        }
        FreeCount = _free.Length;
    }

    public PinnedBlockMemoryPool Pool { get; }

    /// <summary>The first block's address (page aligned).</summary>
    public byte* Start { get; }

    public static int Length => PinnedBlockMemoryPool.RegionSize;

    /// <summary>The registered-buffer entry, or -1. Read and written on the registrar's ring thread only.</summary>
    public int BufferIndex { get; set; } = -1;

    /// <summary>Trimmed: its blocks are off the free list for good.</summary>
    public bool IsDropped { get; private set; }

    // The rest is used under the pool's lock.
    internal bool RentedSinceTrim { get; set; }

    /// <summary>Blocks neither rented nor pinned.</summary>
    internal int FreeCount { get; private set; }

    /// <summary>The most recently freed block.</summary>
    internal PinnedBlock Pop()
    {
        Debug.Assert(Pool.LockHeld, "Pop without the pool's lock");
        Debug.Assert(FreeCount > 0, "Pop from a region with no free block");
        PinnedBlock block = _free[--FreeCount];
        _free[FreeCount] = null!;
        return block;
    }

    internal void Push(PinnedBlock block)
    {
        Debug.Assert(Pool.LockHeld, "Push without the pool's lock");
        Debug.Assert(block.Region == this && FreeCount < _free.Length, "pushed onto a wrong or full region");
        _free[FreeCount++] = block;
    }

    internal void MarkDropped()
    {
        Debug.Assert(Pool.LockHeld, "MarkDropped without the pool's lock");
        Debug.Assert(FreeCount == _free.Length, "a region dropped while a block is rented or pinned");
        IsDropped = true;
    }

    /// <summary>For a region about to be dropped: the ledger stops tracking its blocks.</summary>
    internal void ForgetBlocks(BlockLedger ledger)
    {
        Debug.Assert(Pool.LockHeld, "ForgetBlocks without the pool's lock");
        for (int i = 0; i < FreeCount; i++)
        {
            ledger.Forget(_free[i], 0);
        }
    }

    /// <summary>
    /// A dropped region (no ring's table naming it): its pages go back to the operating system now; touched again (a
    /// use after return, never ours) they come back as zeros, so nothing can fault.
    /// </summary>
    internal void ReleasePages()
    {
        Debug.Assert(IsDropped, "pages released of a region still in use");
        // A refusal only leaves the pages resident.
        _ = Libc.madvise(Start, PinnedBlockMemoryPool.RegionSize, Libc.MADV_DONTNEED);
    }
}
