namespace IoUring.Tests.Support;

/// <summary>Bytes allocated per operation in a steady state, measured with GC.GetTotalAllocatedBytes.</summary>
internal static class Allocations
{
    /// <summary>Runs <paramref name="run"/> with <paramref name="warmUp"/> operations (pools, queues, tiered JIT),
    /// then with <paramref name="measured"/>, each off xunit's synchronization context (which would allocate for every
    /// continuation it is posted), and returns the bytes allocated per measured operation.</summary>
    public static async Task<long> PerOperationAsync(Func<int, Task> run, int warmUp, int measured)
    {
        // A hang guard, not a timing goal: thousands of operations take about a second here, much longer under qemu.
        TimeSpan guard = TimeSpan.FromSeconds(120);
        await Task.Run(() => run(warmUp)).WaitAsync(guard);
        long before = GC.GetTotalAllocatedBytes(precise: true);
        await Task.Run(() => run(measured)).WaitAsync(guard);
        return (GC.GetTotalAllocatedBytes(precise: true) - before) / measured;
    }
}
