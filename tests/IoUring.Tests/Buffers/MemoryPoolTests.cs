using System.Buffers;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Net;

namespace IoUring.Tests.Buffers;

/// <summary>The pinned block pool: blocks are kept and reused, and trimming drops only whole regions that stayed free.</summary>
public sealed partial class MemoryPoolTests
{
    private const int Region = PinnedBlockMemoryPool.RegionSize / PinnedBlockMemoryPool.BlockSize;

    [Fact]
    public void Keeps_every_returned_block_so_a_working_set_of_any_size_is_reused()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        var first = Enumerable.Range(0, 3_000).Select(_ => pool.Rent()).ToList(); // 48 MiB, beyond the old fixed cap of 32 MiB
        var addresses = first.Select(AddressOf).ToHashSet();
        first.ForEach(b => b.Dispose());
        Assert.Equal(pool.Regions * Region, pool.RetainedBlocks);
        Assert.Equal((3_000 + Region - 1) / Region, pool.Regions);

        int regions = pool.Regions;
        var second = Enumerable.Range(0, 3_000).Select(_ => pool.Rent()).ToList();
        Assert.Equal(regions, pool.Regions); // nothing new was allocated
        Assert.True(second.Count(b => addresses.Contains(AddressOf(b))) >= 3_000 - Region); // the same blocks, but for the last region's never-rented ones
        second.ForEach(b => b.Dispose());
        Assert.Equal(0, pool.RentedBlocks);
    }

    [Fact]
    public void Trim_drops_only_whole_regions_none_of_whose_blocks_was_needed_through_a_whole_interval()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        var burst = Enumerable.Range(0, 100).Select(_ => pool.Rent()).ToList();
        burst.ForEach(b => b.Dispose());
        int regions = pool.Regions;

        Assert.Equal(0, pool.Trim()); // the burst needed every region during this interval
        Assert.Equal(regions * Region, pool.RetainedBlocks);

        var steady = Enumerable.Range(0, 30).Select(_ => pool.Rent()).ToList(); // the next interval needs 30
        steady.ForEach(b => b.Dispose());
        int dropped = pool.Trim();
        Assert.True(dropped > 0 && dropped % Region == 0, $"dropped {dropped}");
        Assert.InRange(pool.RetainedBlocks, 30, 30 + 2 * Region); // the regions the 30 came from stay

        Assert.Equal(pool.RetainedBlocks, pool.Trim()); // an idle interval: the rest goes
        Assert.Equal(0, pool.RetainedBlocks);
        Assert.Equal(0, pool.Regions);
    }

    [Fact]
    public void A_trimmed_regions_pages_go_back_to_the_operating_system()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        var blocks = Enumerable.Range(0, Region).Select(_ => pool.Rent()).ToList();
        blocks.ForEach(b => b.Memory.Span.Fill(1)); // every page of the region resident
        PinnedRegion region = PinnedBlockMemoryPool.BlockOf(blocks[0]).Region;
        Assert.Equal(PinnedBlockMemoryPool.RegionSize / Environment.SystemPageSize, ResidentPages(region));
        blocks.ForEach(b => b.Dispose());

        Assert.Equal(0, pool.Trim()); // rented during this interval: kept, and resident
        Assert.Equal(PinnedBlockMemoryPool.RegionSize / Environment.SystemPageSize, ResidentPages(region));
        Assert.Equal(Region, pool.Trim());
        Assert.Equal(0, ResidentPages(region)); // not only off the free list: out of the process's memory
    }

    /// <summary>How many of <paramref name="region"/>'s pages are resident (mincore(2)).</summary>
    internal static unsafe int ResidentPages(PinnedRegion region)
    {
        int pages = PinnedBlockMemoryPool.RegionSize / Environment.SystemPageSize;
        byte* vector = stackalloc byte[pages];
        Assert.True((nuint)region.Start % (nuint)Environment.SystemPageSize == 0,
            $"the region starts at 0x{(nuint)region.Start:x}, not on a page boundary ({Environment.SystemPageSize} B pages)");
        Assert.Equal(0, mincore(region.Start, (nuint)PinnedBlockMemoryPool.RegionSize, vector));
        int resident = 0;
        for (int i = 0; i < pages; i++)
        {
            resident += vector[i] & 1;
        }
        return resident;
    }

    [LibraryImport("libc", SetLastError = true)]
    private static unsafe partial int mincore(void* address, nuint length, byte* vector);

    [Fact]
    public void A_region_with_a_rented_or_pinned_block_is_never_trimmed_and_the_block_stays_valid()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        IMemoryOwner<byte> rented = pool.Rent();
        IMemoryOwner<byte> pinnedAfterReturn = pool.Rent();
        MemoryHandle pin = pinnedAfterReturn.Memory.Pin(); // as a zero-copy send holds it until its notification
        pinnedAfterReturn.Dispose();                       // the pipe gave it back
        Assert.Equal(2, pool.RentedBlocks);                // still out: the pin holds it

        pool.Trim();
        Assert.Equal(0, pool.Trim()); // two idle intervals, but the region holds blocks in use
        Assert.Equal(1, pool.Regions);
        rented.Memory.Span.Fill(7);   // still valid memory
        pin.Dispose();                // the notification: now it is free
        Assert.Equal(1, pool.RentedBlocks);
        rented.Dispose();
        Assert.Equal(0, pool.RentedBlocks);
        Assert.Equal(Region, pool.Trim()); // all free now, and nothing rented from it since the last trim
        Assert.Equal(0, pool.Regions);
    }

    [Fact]
    public void Poisoned_pool_fills_a_block_when_its_last_reference_goes()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false, poisonReturnedBlocks: true);
        IMemoryOwner<byte> block = pool.Rent();
        Memory<byte> memory = block.Memory;
        memory.Span.Fill(1);
        MemoryHandle pin = memory.Pin();
        block.Dispose();
        Assert.All(memory.Span.ToArray(), b => Assert.Equal(1, b)); // pinned: not returned, not poisoned
        pin.Dispose();
        Assert.All(memory.Span.ToArray(), b => Assert.Equal(PinnedBlockMemoryPool.PoisonByte, b));
    }

    private static unsafe nint AddressOf(IMemoryOwner<byte> block)
    {
        using System.Buffers.MemoryHandle handle = block.Memory.Pin();
        return (nint)handle.Pointer;
    }
}
