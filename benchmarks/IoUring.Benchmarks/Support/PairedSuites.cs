using System.Globalization;

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
    /// its self-check ("echo-aa": each transport against itself, where a fair runner measures 1.0), and so do the accept
    /// storm ("storm": <see cref="Net.AcceptStormBenchmarks"/>'s servers in pairs; "storm-process": the IoUring server in
    /// a process of its own) and its self-check ("storm-aa").
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
        if (string.Equals(only, "storm", StringComparison.OrdinalIgnoreCase))
        {
            RunStorm(rounds);
        }
        if (string.Equals(only, "storm-process", StringComparison.OrdinalIgnoreCase))
        {
            RunStorm(rounds, serverProcess: true);
        }
        if (string.Equals(only, "storm-aa", StringComparison.OrdinalIgnoreCase))
        {
            RunStormSelfCheck(rounds);
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

    // The accept storm's servers, each ready to be timed one storm at a time (the count of served connections reset
    // before each, as BenchmarkDotNet's IterationSetup does). Warm-up: 8 s, about five storms of each side
    // (the BenchmarkDotNet job's five).
    private static readonly TimeSpan s_stormWarmup = TimeSpan.FromSeconds(8);

    private static (Net.AcceptStormBenchmarks Suite, Action Storm) StormServer(string server)
    {
        var suite = new Net.AcceptStormBenchmarks { Clients = 10_000, Concurrency = 256 };
        Func<Task> storm;
        switch (server)
        {
            case "sockets": suite.SetupSockets(); storm = suite.Sockets; break;
            case "iouring": suite.SetupIoUring(); storm = suite.IoUring; break;
            case "single-shot": suite.SetupIoUringSingleShot(); storm = suite.IoUringSingleShot; break;
            case "iouring-process": suite.SetupIoUringProcess(); storm = suite.ServerProcess; break;
            case "c": suite.SetupCServer(); storm = suite.CServer; break;
            default: throw new ArgumentException($"Unknown storm server '{server}' (sockets, iouring, single-shot, iouring-process or c).", nameof(server));
        }
        return (suite, () => { suite.ResetCount(); storm().GetAwaiter().GetResult(); });
    }

    private static void StopStormServer(Net.AcceptStormBenchmarks suite, string server)
    {
        switch (server)
        {
            case "sockets": suite.CleanupSockets(); break;
            case "iouring" or "single-shot": suite.CleanupIoUring(); break;
            default: suite.CleanupCServer(); break; // c, iouring-process: a server process
        }
    }

    // IoUring and the C floor each against System.Net.Sockets, IoUring against the floor, and single-shot against
    // multishot accept, each pair in rounds of its own. "storm-process": the IoUring server in a process of its own (as the
    // C floor is) against the floor and against itself in the clients' process.
    private static void RunStorm(int rounds, bool serverProcess = false)
    {
        var pairs = serverProcess
            ? new[] { ("c", "iouring-process"), ("iouring", "iouring-process") }
            : new[] { ("sockets", "iouring"), ("sockets", "c"), ("c", "iouring"), ("iouring", "single-shot") };
        foreach ((string baseline, string candidate) in pairs)
        {
            var (baselineSuite, baselineStorm) = StormServer(baseline);
            var (candidateSuite, candidateStorm) = StormServer(candidate);
            PairedRunner.Run($"accept storm 10,000 x 128 B: {candidate} vs {baseline}", 1, baselineStorm, candidateStorm, rounds, s_stormWarmup);
            StopStormServer(candidateSuite, candidate);
            StopStormServer(baselineSuite, baseline);
        }
    }

    private static void RunStormSelfCheck(int rounds)
    {
        foreach (string server in new[] { "sockets", "iouring" })
        {
            var (suite, storm) = StormServer(server);
            PairedRunner.Run($"accept storm 10,000 x 128 B: {server} vs itself", 1, storm, storm, rounds, s_stormWarmup);
            StopStormServer(suite, server);
        }
    }

    /// <summary>
    /// <c>-- --storm-trace [sockets|iouring|single-shot|iouring-process|c] [storms]</c>: one server's storms one after another
    /// in this process, each with its time, this process's CPU time, the server process's (C, iouring-process: the IoUring
    /// server in a process of its own), thread-pool work items per connection and the kernel's TIME_WAIT count,
    /// to see how far one storm drifts from the next (and why ratios of storms timed apart need pairing).
    /// </summary>
    public static void TraceStorm(string server, int storms)
    {
        var (suite, storm) = StormServer(server);
        using var process = System.Diagnostics.Process.GetCurrentProcess();
        Console.WriteLine("| storm | ms | this process's CPU ms | server process's CPU ms | pool items per connection | TIME_WAIT |");
        Console.WriteLine("|---:|---:|---:|---:|---:|---:|");
        for (int i = 0; i < storms; i++)
        {
            process.Refresh();
            TimeSpan cpuBefore = process.TotalProcessorTime;
            TimeSpan serverCpuBefore = suite.ServerProcessCpu;
            long itemsBefore = ThreadPool.CompletedWorkItemCount;
            long start = System.Diagnostics.Stopwatch.GetTimestamp();
            storm();
            double ms = System.Diagnostics.Stopwatch.GetElapsedTime(start).TotalMilliseconds;
            process.Refresh();
            double cpuMs = (process.TotalProcessorTime - cpuBefore).TotalMilliseconds;
            double serverCpuMs = (suite.ServerProcessCpu - serverCpuBefore).TotalMilliseconds;
            double items = (double)(ThreadPool.CompletedWorkItemCount - itemsBefore) / suite.Clients;
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"| {i} | {ms:F0} | {cpuMs:F0} | {serverCpuMs:F0} | {items:F2} | {TimeWaitCount()} |"));
        }
        StopStormServer(suite, server);
    }

    // The tw field of /proc/net/sockstat's TCP line ("TCP: inuse 2 orphan 0 tw 14120 alloc 2 mem 31").
    private static string TimeWaitCount()
    {
        string[] fields = File.ReadAllLines("/proc/net/sockstat").First(l => l.StartsWith("TCP:", StringComparison.Ordinal)).Split(' ');
        int index = Array.IndexOf(fields, "tw");
        return index >= 0 && index + 1 < fields.Length ? fields[index + 1] : "?";
    }
}
