using System.Buffers;
using IoUring.Net;

namespace IoUring.Tests.Net;

/// <summary>The pinned block pool: blocks are kept and reused, and trimming drops only those that stayed free.</summary>
public sealed class MemoryPoolTests
{
    [Fact]
    public void Keeps_every_returned_block_so_a_working_set_of_any_size_is_reused()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        var first = Enumerable.Range(0, 3_000).Select(_ => pool.Rent()).ToList(); // 48 MiB, beyond the old fixed cap of 32 MiB
        var addresses = first.Select(AddressOf).ToHashSet();
        first.ForEach(b => b.Dispose());
        Assert.Equal(3_000, pool.RetainedBlocks);

        var second = Enumerable.Range(0, 3_000).Select(_ => pool.Rent()).ToList();
        Assert.All(second, b => Assert.Contains(AddressOf(b), addresses)); // nothing new was allocated
        second.ForEach(b => b.Dispose());
        Assert.Equal(0, pool.RentedBlocks);
    }

    [Fact]
    public void Trim_drops_only_the_blocks_that_stayed_free_through_a_whole_interval()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        var burst = Enumerable.Range(0, 100).Select(_ => pool.Rent()).ToList();
        burst.ForEach(b => b.Dispose());

        Assert.Equal(0, pool.Trim()); // the burst needed all 100 during this interval
        Assert.Equal(100, pool.RetainedBlocks);

        var steady = Enumerable.Range(0, 30).Select(_ => pool.Rent()).ToList(); // the next interval needs 30
        steady.ForEach(b => b.Dispose());
        Assert.Equal(70, pool.Trim());
        Assert.Equal(30, pool.RetainedBlocks);

        Assert.Equal(30, pool.Trim()); // an idle interval: the rest goes
        Assert.Equal(0, pool.RetainedBlocks);
    }

    private static unsafe nint AddressOf(IMemoryOwner<byte> block)
    {
        using System.Buffers.MemoryHandle handle = block.Memory.Pin();
        return (nint)handle.Pointer;
    }
}
