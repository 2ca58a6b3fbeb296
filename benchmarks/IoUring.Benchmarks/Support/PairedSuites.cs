namespace IoUring.Benchmarks.Support;

/// <summary>
/// The comparisons the suites make, measured interleaved in one process with <see cref="PairedRunner"/>
/// (<c>-- --paired [rounds] [group]</c>). Uses the suites' own setup and benchmark methods, on this thread.
/// </summary>
internal static class PairedSuites
{
    /// <summary>
    /// Runs the ring-core comparisons (nop, bufferring, custom), or only <paramref name="only"/>'s group. The loopback echo
    /// ("echo": IoUring against System.Net.Sockets, every cell of <see cref="Net.EchoBenchmarks"/>) runs only when named, as does
    /// its self-check ("echo-aa": each transport against itself, where a fair runner measures 1.0).
    /// </summary>
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

        if (string.Equals(only, "echo", StringComparison.OrdinalIgnoreCase))
        {
            RunEcho(rounds);
        }
        if (string.Equals(only, "echo-aa", StringComparison.OrdinalIgnoreCase))
        {
            RunEchoSelfCheck(rounds);
        }
    }

    // Both transports' servers and clients live in this process side by side; each side's loops or threads idle while
    // the other is timed. Driven from this thread, blocking on each operation, as BenchmarkDotNet drives the suite.
    private static void RunEcho(int rounds)
    {
        foreach (int connections in new[] { 1, 64 })
        {
            foreach (int size in new[] { 64, 4 * 1024, 64 * 1024, 1024 * 1024 })
            {
                var sockets = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
                var ioUring = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
                sockets.SetupSockets();
                ioUring.SetupIoUring();
                PairedRunner.Run($"echo {size} B x {connections}: IoUring vs System.Net.Sockets", 1,
                    () => sockets.Sockets().GetAwaiter().GetResult(), () => ioUring.IoUring().GetAwaiter().GetResult(), rounds,
                    warmup: TimeSpan.FromSeconds(5));
                ioUring.CleanupIoUring();
                sockets.CleanupSockets();
            }
        }
    }

    private static void RunEchoSelfCheck(int rounds)
    {
        foreach (int connections in new[] { 1, 64 })
        {
            foreach (int size in new[] { 64, 4 * 1024, 64 * 1024, 1024 * 1024 })
            {
                var sockets = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
                sockets.SetupSockets();
                PairedRunner.Run($"echo {size} B x {connections}: System.Net.Sockets vs itself", 1,
                    () => sockets.Sockets().GetAwaiter().GetResult(), () => sockets.Sockets().GetAwaiter().GetResult(), rounds,
                    warmup: TimeSpan.FromSeconds(5));
                sockets.CleanupSockets();

                var ioUring = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
                ioUring.SetupIoUring();
                PairedRunner.Run($"echo {size} B x {connections}: IoUring vs itself", 1,
                    () => ioUring.IoUring().GetAwaiter().GetResult(), () => ioUring.IoUring().GetAwaiter().GetResult(), rounds,
                    warmup: TimeSpan.FromSeconds(5));
                ioUring.CleanupIoUring();
            }
        }
    }
}
