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

    // Every cell of the echo suite, and the warm-up each cell gets before its rounds (past tier 0 for this library).
    private static readonly (int Size, int Connections)[] s_echoCells =
        [(64, 1), (4 * 1024, 1), (64 * 1024, 1), (1024 * 1024, 1), (64, 64), (4 * 1024, 64), (64 * 1024, 64), (1024 * 1024, 64)];
    private static readonly TimeSpan s_echoWarmup = TimeSpan.FromSeconds(5);

    // Both transports' servers and clients live in this process side by side; each side's loops or threads idle while
    // the other is timed. Driven from this thread, blocking on each operation, as BenchmarkDotNet drives the suite.
    private static void RunEcho(int rounds)
    {
        foreach ((int size, int connections) in s_echoCells)
        {
            var sockets = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
            var ioUring = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
            sockets.SetupSockets();
            ioUring.SetupIoUring();
            PairedRunner.Run($"echo {size} B x {connections}: IoUring vs System.Net.Sockets", 1,
                () => sockets.Sockets().GetAwaiter().GetResult(), () => ioUring.IoUring().GetAwaiter().GetResult(), rounds, s_echoWarmup);
            ioUring.CleanupIoUring();
            sockets.CleanupSockets();
        }
    }

    private static void RunEchoSelfCheck(int rounds)
    {
        foreach ((int size, int connections) in s_echoCells)
        {
            var sockets = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
            sockets.SetupSockets();
            Action timeSockets = () => sockets.Sockets().GetAwaiter().GetResult();
            PairedRunner.Run($"echo {size} B x {connections}: System.Net.Sockets vs itself", 1, timeSockets, timeSockets, rounds, s_echoWarmup);
            sockets.CleanupSockets();

            var ioUring = new Net.EchoBenchmarks { MessageSize = size, Connections = connections };
            ioUring.SetupIoUring();
            Action timeIoUring = () => ioUring.IoUring().GetAwaiter().GetResult();
            PairedRunner.Run($"echo {size} B x {connections}: IoUring vs itself", 1, timeIoUring, timeIoUring, rounds, s_echoWarmup);
            ioUring.CleanupIoUring();
        }
    }
}
