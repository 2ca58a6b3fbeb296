using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using IoUring.AspNetCore.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// The Kestrel sample on io_uring in a child process with a low RLIMIT_NOFILE, flooded with more connections than
/// it has fds: the acceptor backs off instead of spinning, established connections are served, and once the flood
/// leaves, new connections are served again.
/// </summary>
public sealed class FdExhaustionTests(LauncherFixture launcher, ITestOutputHelper output) : IClassFixture<LauncherFixture>
{
    private const int FdLimit = 384;       // the runtime alone holds ~200 (two per loaded assembly)
    private const int Established = 16;
    private const int PoolThreads = 4;
    private const int Backlogged = 100;    // flood connections beyond the fds: they wait in the listen backlog (512)
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan s_window = TimeSpan.FromSeconds(2);
    private static readonly byte[] s_request = "GET /plaintext HTTP/1.1\r\nHost: test\r\n\r\n"u8.ToArray();

    // IOURING_FLOOD_TRANSPORT=sockets runs the same flood against Kestrel's Sockets transport, for comparison.
    private static string Transport => Environment.GetEnvironmentVariable("IOURING_FLOOD_TRANSPORT") ?? "iouring";

    [Fact]
    public async Task Out_of_fds_the_server_backs_off_keeps_serving_and_recovers()
    {
        // A process out of fds cannot start a thread: the runtime needs a pipe for each one (pipe2 fails with
        // EMFILE), and the thread pool's worker injection then dies with an unhandled OutOfMemoryException ("Out of
        // memory.", SIGABRT; 1 run in ~4 without this). That is the runtime, on any transport, so the pool is held
        // at a fixed size, fully started before the flood, whose threads never retire.
        var environment = new Dictionary<string, string>
        {
            ["DOTNET_ThreadPool_ForceMinWorkerThreads"] = PoolThreads.ToString(System.Globalization.CultureInfo.InvariantCulture),
            ["DOTNET_ThreadPool_ForceMaxWorkerThreads"] = PoolThreads.ToString(System.Globalization.CultureInfo.InvariantCulture),
            ["DOTNET_ThreadPool_ThreadTimeoutMs"] = "-1",
        };
        await using ChildProcess child = ChildProcess.StartDotnet(
            launcher.Path, ["--nofile", FdLimit.ToString(System.Globalization.CultureInfo.InvariantCulture), "--lifetime", "300"],
            RepoFiles.Sample("KestrelSample"), ["--transport", Transport, "--urls", "http://127.0.0.1:0"], environment);
        var sockets = new List<Socket>();
        try
        {
            int port = await child.WaitForKestrelPortAsync(s_hangGuard);
            string transportLine = await child.WaitForLineAsync(l => l.StartsWith("Transport:", StringComparison.Ordinal), s_hangGuard);
            Assert.Equal(Transport == "iouring" ? "Transport: io_uring" : "Transport: Sockets", transportLine);
            var endPoint = new IPEndPoint(IPAddress.Loopback, port);

            // Warm up: established keep-alive connections serve until every pool thread exists; a reset connection
            // runs the reset path once (it loads code, which needs fds, before there are none).
            var established = new List<Socket>();
            for (int i = 0; i < Established; i++)
            {
                established.Add(await ConnectAsync(endPoint, sockets));
            }
            var clock = Stopwatch.StartNew();
            while (child.ThreadNames().Count(n => n == ".NET TP Worker") < PoolThreads)
            {
                Assert.True(clock.Elapsed < s_hangGuard, "the thread pool did not reach its fixed size");
                await Task.WhenAll(established.Select(GetPlaintextAsync));
            }
            using (Socket reset = await ConnectAsync(endPoint, sockets))
            {
                await GetPlaintextAsync(reset);
                RawClient.Reset(reset);
            }
            await Task.Delay(500); // let the reset connection close
            int fdsBefore = child.OpenFds();

            // Flood: more connections than fds left.
            int floodCount = FdLimit - fdsBefore + Backlogged;
            var flood = new List<Socket>();
            for (int i = 0; i < floodCount; i++)
            {
                flood.Add(await ConnectAsync(endPoint, sockets));
            }
            // One fd number stays reserved by the runtime's debugger thread, blocked in open() on its FIFO, so a
            // full table shows as FdLimit - 1 entries.
            await WaitUntilAsync(() => child.OpenFds() >= FdLimit - 2, "the child's fd table never filled up");
            int fdsExhausted = child.OpenFds();
            Socket probe = await ConnectAsync(endPoint, sockets);
            await probe.SendAsync(s_request.AsMemory());

            // Exhausted: CPU over a window. A spinning acceptor would hold a loop thread at ~100%.
            Dictionary<int, (string Name, long Ticks)> threadsBefore = child.ThreadTicks();
            Dictionary<int, long> switchesBefore = child.ContextSwitches("io_uring");
            long ticksBefore = child.CpuTicks();
            var window = Stopwatch.StartNew();
            await Task.Delay(s_window);
            long ticksAfter = child.CpuTicks();
            Dictionary<int, (string Name, long Ticks)> threadsAfter = child.ThreadTicks();
            Dictionary<int, long> switchesAfter = child.ContextSwitches("io_uring");
            double seconds = window.Elapsed.TotalSeconds;
            double processCpu = (ticksAfter - ticksBefore) / (double)ChildProcess.TicksPerSecond / seconds;
            var busiest = threadsAfter
                .Select(t => (t.Value.Name, Ticks: t.Value.Ticks - (threadsBefore.TryGetValue(t.Key, out var b) ? b.Ticks : 0)))
                .Where(t => t.Ticks > 0).OrderByDescending(t => t.Ticks).ToList();
            double loopCpu = busiest.Where(t => t.Name.StartsWith("io_uring", StringComparison.Ordinal)).Sum(t => t.Ticks) / (double)ChildProcess.TicksPerSecond / seconds;
            // Each wakeup of a loop thread is a context switch: with the 50 ms backoff about 20 per second.
            double[] loopWakeups = [.. switchesAfter.Select(t => (t.Value - switchesBefore.GetValueOrDefault(t.Key)) / seconds)];
            int probeBytesWhileExhausted = probe.Available;

            // Established connections are still served.
            var served = Stopwatch.StartNew();
            await Task.WhenAll(established.Select(GetPlaintextAsync));
            TimeSpan establishedLatency = served.Elapsed;

            // The flood leaves: the backlog drains and new connections are served again.
            var recovery = Stopwatch.StartNew();
            foreach (Socket socket in flood)
            {
                RawClient.Reset(socket);
            }
            string probeResponse = await RawClient.ReceiveUntilAsync(probe, t => t.Contains("Hello, World!", StringComparison.Ordinal));
            TimeSpan probeServedAfter = recovery.Elapsed;
            using (Socket fresh = await ConnectAsync(endPoint, sockets))
            {
                await GetPlaintextAsync(fresh);
            }
            await WaitUntilAsync(() => child.OpenFds() <= fdsBefore + 8, "the child's fds did not return to their level before the flood");
            int fdsAfter = child.OpenFds();

            output.WriteLine($"transport {Transport}, RLIMIT_NOFILE {FdLimit}: {fdsBefore} fds before the flood, {floodCount} flood connections, {fdsExhausted} fds when exhausted, {fdsAfter} after");
            output.WriteLine($"exhausted for {seconds:F2} s: process CPU {processCpu:P1} of one core, io_uring loop threads {loopCpu:P1} with {string.Join(" and ", loopWakeups.Select(w => w.ToString("F0", System.Globalization.CultureInfo.InvariantCulture)))} wakeups/s; threads that ran: {string.Join(", ", busiest.Select(t => $"{t.Name} {t.Ticks}"))} (ticks of 10 ms)");
            output.WriteLine($"{Established} established connections served while exhausted in {establishedLatency.TotalMilliseconds:F0} ms; the backlogged probe was served {probeServedAfter.TotalMilliseconds:F0} ms after the flood was reset");

            Assert.False(child.HasExited, $"the server died:\n{child.Output}");
            Assert.Equal(0, probeBytesWhileExhausted); // it really was out of fds: a new connection was not served
            Assert.True(processCpu < 0.30, $"the exhausted server used {processCpu:P1} of a core: it spins instead of backing off");
            if (Transport == "iouring")
            {
                Assert.NotEmpty(loopWakeups); // one loop per CPU
                Assert.True(loopCpu < 0.10, $"the io_uring loop threads used {loopCpu:P1} of a core while exhausted: the acceptor spins");
                Assert.All(loopWakeups, w => Assert.True(w < 100, $"a loop thread woke {w:F0} times a second while exhausted: the acceptor does not back off 50 ms"));
            }
            Assert.Contains("HTTP/1.1 200 OK", probeResponse);
        }
        finally
        {
            foreach (Socket socket in sockets)
            {
                socket.Dispose();
            }
        }
    }

    private static async Task<Socket> ConnectAsync(IPEndPoint endPoint, List<Socket> all)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        all.Add(socket);
        await socket.ConnectAsync(endPoint).WaitAsync(s_hangGuard);
        return socket;
    }

    private static async Task GetPlaintextAsync(Socket socket)
    {
        await socket.SendAsync(s_request.AsMemory()).AsTask().WaitAsync(s_hangGuard);
        string response = await RawClient.ReceiveUntilAsync(socket, t => t.Contains("Hello, World!", StringComparison.Ordinal));
        Assert.Contains("HTTP/1.1 200 OK", response);
    }

    private static async Task WaitUntilAsync(Func<bool> condition, string failure)
    {
        var clock = Stopwatch.StartNew();
        while (!condition())
        {
            Assert.True(clock.Elapsed < s_hangGuard, failure);
            await Task.Delay(20);
        }
    }
}
