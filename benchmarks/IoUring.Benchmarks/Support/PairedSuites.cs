namespace IoUring.Benchmarks.Support;

/// <summary>
/// The comparisons the suites make, measured interleaved in one process with <see cref="PairedRunner"/>
/// (<c>-- --paired [rounds] [group]</c>). Uses the suites' own setup and benchmark methods, on this thread.
/// </summary>
internal static class PairedSuites
{
    /// <summary>Runs every comparison, or only <paramref name="only"/>'s group: nop, bufferring or custom.</summary>
    public static void Run(int rounds, string? only = null)
    {
        PairedRunner.PrintHeader();
        bool Wanted(string group) => only is null || string.Equals(only, group, StringComparison.OrdinalIgnoreCase);

        foreach (int batch in Wanted("nop") ? new[] { 1, 2, 4, 32 } : [])
        {
            var plain = new NopBenchmarks { Batch = batch, RegisterRingFd = false };
            var registered = new NopBenchmarks { Batch = batch, RegisterRingFd = true };
            plain.Setup();
            registered.Setup();
            PairedRunner.Run($"NOP batch {batch}: registered fd vs plain fd", NopBenchmarks.OperationsPerInvoke,
                () => plain.Nop(), () => registered.Nop(), rounds);
            registered.Cleanup();
            plain.Cleanup();
        }

        foreach (int replenish in Wanted("bufferring") ? new[] { 1, 32 } : [])
        {
            var suite = new BufferRingBenchmarks { Replenish = replenish };
            suite.Setup();
            PairedRunner.Run($"RECV, replenish {replenish}: PROVIDE_BUFFERS vs buffer ring", BufferRingBenchmarks.OperationsPerInvoke,
                () => suite.BufferRing(), () => suite.ProvideBuffers(), rounds);
            suite.Cleanup();
        }

        foreach (int inFlight in Wanted("custom") ? new[] { 1, 64 } : [])
        {
            var suite = new CustomOperationBenchmarks { InFlight = inFlight };
            suite.Setup();
            PairedRunner.Run($"NOP loop, {inFlight} in flight: custom vs internal", CustomOperationBenchmarks.OperationsPerInvoke,
                suite.Internal, suite.Custom, rounds);
            suite.Cleanup();
        }
    }
}
