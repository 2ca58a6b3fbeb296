using IoUring.Buffers;
using IoUring.Loops;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>This assembly runs on the diagnostic pools too (tests/PoolCheck.cs): the loops a Kestrel server on io_uring
/// makes keep ledgers of their blocks.</summary>
public sealed class PoolDiagnosticsSwitchTests
{
    [Fact]
    public void The_transport_tests_run_on_the_diagnostic_pools()
    {
        Assert.True(PoolDiagnostics.Enabled);
        using var loop = new EventLoop();
        Assert.NotNull(loop.MemoryPoolIfCreated ?? (PinnedBlockMemoryPool)loop.MemoryPool);
        Assert.NotNull(loop.MemoryPoolIfCreated!.Ledger);
        Assert.NotNull(loop.LargeBlockPool.Ledger);
    }
}
