namespace IoUring.Tests.Support;

/// <summary>Measures what a steady-state loop of I/O allocates: process-wide, so its tests run alone
/// (<see cref="FdCountingCollection"/>).</summary>
internal static class Allocations
{
    /// <summary>
    /// Runs <paramref name="iterations"/> (given a count) first to warm up (pools, queues, tiered JIT), then again to
    /// measure, off xunit's synchronization context (which would allocate for every continuation posted to it); returns
    /// the bytes allocated per iteration.
    /// </summary>
    public static async Task<long> PerIterationAsync(Func<int, Task> iterations, int warmUp = 3000, int measured = 5000)
    {
        // A hang guard, not a timing goal: 8,000 round trips take ~1 s here, much longer under qemu's emulation.
        TimeSpan guard = TimeSpan.FromSeconds(120);
        await Task.Run(() => iterations(warmUp)).WaitAsync(guard);
        long before = GC.GetTotalAllocatedBytes(precise: true);
        await Task.Run(() => iterations(measured)).WaitAsync(guard);
        return (GC.GetTotalAllocatedBytes(precise: true) - before) / measured;
    }
}
