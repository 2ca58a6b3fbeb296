using System.Buffers;
using System.Runtime.CompilerServices;
using IoUring.Buffers;
using IoUring.Loops;

namespace IoUring.Tests.Buffers;

/// <summary>
/// The diagnostic pools the whole suite runs on (tests/PoolCheck.cs): each misuse below is done on purpose and must be
/// reported, with where it happened. The problems are taken per pool, so the suite's own check (which fails any test
/// after which a pool reported one) sees none of them; alone, so no test ending meanwhile takes them first.
/// </summary>
[Collection(Support.DeliberatePoolProblemsCollection.Name)]
public sealed class PoolDiagnosticsTests
{
    [Fact]
    public void The_suite_runs_on_the_diagnostic_pools()
    {
        Assert.True(PoolDiagnostics.Enabled);
        using var pool = new PinnedBlockMemoryPool(trim: false);
        Assert.NotNull(pool.Ledger);
        Assert.NotNull(new ReceiveBlockPool(4096, maxIdle: 4).Ledger);
    }

    [Fact]
    public void A_block_still_out_when_its_loop_stops_is_reported_with_the_stack_that_rented_it()
    {
        var loop = new EventLoop();
        IMemoryOwner<byte> kept = RentAndKeep(loop.MemoryPool);
        IMemoryOwner<byte> large = RentAndKeep(loop.LargeMemoryPool);
        loop.Dispose();

        foreach (BlockLedger ledger in new[] { loop.MemoryPoolIfCreated!.Ledger!, loop.LargeBlockPool.Ledger! })
        {
            string leak = Assert.Single(PoolDiagnostics.TakeProblems(ledger, TimeSpan.Zero));
            Assert.Contains("1 block(s) never returned after the pool stopped", leak);
            Assert.Contains(nameof(RentAndKeep), leak); // the rent's stack
            Assert.Contains(nameof(A_block_still_out_when_its_loop_stops_is_reported_with_the_stack_that_rented_it),
                leak); // where the loop was made
        }
        kept.Dispose();
        large.Dispose();
    }

    [Fact]
    public void A_block_that_comes_back_within_the_grace_after_its_loop_stopped_is_no_leak()
    {
        var loop = new EventLoop();
        IMemoryOwner<byte> kept = RentAndKeep(loop.MemoryPool);
        loop.Dispose();
        BlockLedger ledger = loop.MemoryPoolIfCreated!.Ledger!;
        Assert.Equal(1, ledger.OutstandingCount);
        kept.Dispose();

        Assert.Empty(PoolDiagnostics.TakeProblems(ledger, TimeSpan.FromMinutes(1)));
    }

    [Fact]
    public void Blocks_only_the_kernel_pins_when_the_loop_stops_are_kept_on_purpose_not_leaked()
    {
        var pool = new PinnedBlockMemoryPool(trim: false);
        IMemoryOwner<byte> sent = pool.Rent(), kept = RentAndKeep(pool);
        MemoryHandle notificationPending = sent.Memory.Pin(); // as a zero-copy send whose notification never came
        sent.Dispose();
        pool.Shutdown(kernelKeepsPins: true);

        string leak = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("1 block(s) never returned", leak); // the one its renter still holds
        Assert.Contains(nameof(RentAndKeep), leak);
        kept.Dispose();
        notificationPending.Dispose();
    }

    [Fact]
    public void A_receive_block_still_out_when_its_pool_stops_is_reported_with_the_stack_that_rented_it()
    {
        var pool = new ReceiveBlockPool(4096, maxIdle: 4);
        ReceiveBlock kept = RentAndKeep(pool);
        pool.OnStopped();

        string leak = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("1 block(s) never returned", leak);
        Assert.Contains(nameof(RentAndKeep), leak);
        pool.Return(kept);
    }

    [Fact]
    public void A_block_returned_twice_is_reported_at_once_and_never_reaches_two_renters()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        IMemoryOwner<byte> first = pool.Rent();
        first.Dispose();
        IMemoryOwner<byte> second = pool.Rent(); // the same block, now someone else's
        Assert.Equal(PinnedBlockMemoryPool.BlockOf(first), PinnedBlockMemoryPool.BlockOf(second));

        first.Dispose(); // a stale owner: without the check, it would release the second renter's block
        string problem = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("returned twice", problem);
        Assert.Contains(nameof(A_block_returned_twice_is_reported_at_once_and_never_reaches_two_renters), problem);
        Assert.Equal(1, pool.RentedBlocks); // the second renter still holds it
        IMemoryOwner<byte> third = pool.Rent();
        Assert.NotEqual(PinnedBlockMemoryPool.BlockOf(second), PinnedBlockMemoryPool.BlockOf(third));
        second.Dispose();
        third.Dispose();
    }

    [Fact]
    public void A_block_unpinned_once_too_often_is_reported()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        IMemoryOwner<byte> owner = pool.Rent();
        MemoryHandle pin = owner.Memory.Pin();
        MemoryHandle copy = pin;
        pin.Dispose();
        copy.Dispose(); // the same pin released twice: the block goes back while its renter still holds it
        owner.Dispose();

        string problem = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("unpinned more often than it was pinned", problem);
    }

    [Fact]
    public void A_receive_block_returned_twice_is_reported_at_once_and_never_reaches_two_renters()
    {
        var pool = new ReceiveBlockPool(4096, maxIdle: 4);
        ReceiveBlock block = pool.Rent();
        pool.Return(block);
        pool.Return(block);

        string problem = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("returned twice", problem);
        ReceiveBlock a = pool.Rent(), b = pool.Rent();
        Assert.False(a.Array == b.Array && a.Offset == b.Offset);
        pool.Return(a);
        pool.Return(b);
        Assert.Empty(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
    }

    [Fact]
    public void A_write_after_return_is_reported_on_the_next_rent_with_the_stack_of_the_renter_that_wrote()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        Memory<byte> memory = RentWriteAndReturn(pool);
        memory.Span[100] = 42; // after the return

        IMemoryOwner<byte> next = pool.Rent(); // the same block: the poison is checked
        Assert.Equal(PinnedBlockMemoryPool.BlockOf(next), MemoryManagerOf(memory));
        string problem = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("written after its return (byte 100 of 16384 is 0x2A", problem);
        Assert.Contains(nameof(RentWriteAndReturn), problem);
        next.Dispose();
    }

    [Fact]
    public void A_receive_block_written_after_its_return_is_reported_on_its_next_rent()
    {
        var pool = new ReceiveBlockPool(4096, maxIdle: 4);
        ReceiveBlock block = pool.Rent();
        pool.Return(block);
        block.Array[block.Offset + 7] = 1; // after the return

        ReceiveBlock next = pool.Rent();
        Assert.Equal((block.Array, block.Offset), (next.Array, next.Offset));
        string problem = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("written after its return (byte 7 of 4096", problem);
        pool.Return(next);
    }

    [Fact]
    public void Memory_asked_for_after_the_return_is_reported()
    {
        using var pool = new PinnedBlockMemoryPool(trim: false);
        IMemoryOwner<byte> owner = pool.Rent();
        owner.Dispose();
        _ = owner.Memory;

        string problem = Assert.Single(PoolDiagnostics.TakeProblems(pool.Ledger!, TimeSpan.Zero));
        Assert.Contains("memory was asked for after its return", problem);
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static IMemoryOwner<byte> RentAndKeep(MemoryPool<byte> pool) => pool.Rent();

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static ReceiveBlock RentAndKeep(ReceiveBlockPool pool) => pool.Rent();

    [MethodImpl(MethodImplOptions.NoInlining)]
    private static Memory<byte> RentWriteAndReturn(PinnedBlockMemoryPool pool)
    {
        IMemoryOwner<byte> owner = pool.Rent();
        Memory<byte> memory = owner.Memory;
        memory.Span.Fill(1);
        owner.Dispose();
        return memory;
    }

    private static PinnedBlock MemoryManagerOf(Memory<byte> memory)
        => System.Runtime.InteropServices.MemoryMarshal.TryGetMemoryManager((ReadOnlyMemory<byte>)memory,
            out PinnedBlock? block) ? block : throw new InvalidOperationException("not a pool block");
}
