using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Buffers;

/// <summary>
/// One region of a <see cref="PinnedBlockMemoryPool"/>: <see cref="Length"/> bytes of blocks in one pinned array, page
/// aligned so a registration pins (and madvise releases) whole pages of its own.
/// </summary>
internal sealed unsafe class PinnedRegion
{
    // not always 4 KiB: 16 or 64 KiB on some arm64 kernels
    private static readonly int s_pageSize = Environment.SystemPageSize;

    private readonly byte[] _array; // kept alive by every block (through Region): their pointers are into it
    private readonly PinnedBlock[] _free; // a stack

    public PinnedRegion(PinnedBlockMemoryPool pool)
    {
        Pool = pool;
        _array = GC.AllocateUninitializedArray<byte>(Length + s_pageSize, pinned: true);
        // Pinned object heap: the address is stable for the array's life.
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

    public byte* Start { get; }

    public static int Length => PinnedBlockMemoryPool.RegionSize;

    /// <summary>The registered-buffer entry, or -1. The registrar's ring thread only.</summary>
    public int BufferIndex { get; set; } = -1;

    public bool IsDropped { get; private set; }

    // The rest is used under the pool's lock.
    internal bool RentedSinceTrim { get; set; }

    internal int FreeCount { get; private set; }

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

    internal void ForgetBlocks(BlockLedger ledger)
    {
        Debug.Assert(Pool.LockHeld, "ForgetBlocks without the pool's lock");
        for (int i = 0; i < FreeCount; i++)
        {
            ledger.Forget(_free[i], 0);
        }
    }

    /// <summary>Gives a dropped region's pages back (no ring's table may name it); touched again, they read as zeros,
    /// never fault.</summary>
    internal void ReleasePages()
    {
        Debug.Assert(IsDropped, "pages released of a region still in use");
        // A refusal only leaves the pages resident.
        _ = Libc.madvise(Start, PinnedBlockMemoryPool.RegionSize, Libc.MADV_DONTNEED);
    }
}
