using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Tests.Net;
using IoUring.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.Tests.Reliability;

[Collection(FdCountingCollection.Name)]
public sealed class ResourceTests(ITestOutputHelper output)
{
    [Fact]
    public async Task Every_fd_the_library_opens_is_close_on_exec()
    {
        var before = OwnedFds();
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        await using IoUringConnection outbound = await network.ConnectAsync(listener.LocalEndPoint);
        await outbound.Output.WriteAsync(new byte[] { 1 });
        await outbound.Input.ReadAsync(); // the accepted side exists and echoed

        var opened = OwnedFds().Except(before).ToList();
        Assert.True(opened.Count >= 2 + 2 + 1 + 2, $"only {opened.Count} new fds: rings, eventfds, listener, sockets expected");
        Assert.All(opened, fd => Assert.True((Libc.fcntl(fd, Libc.F_GETFD, 0) & Libc.FD_CLOEXEC) != 0, $"fd {fd} is not CLOEXEC"));
    }

    private static HashSet<int> OwnedFds()
    {
        var set = new HashSet<int>();
        foreach (string entry in Directory.GetFileSystemEntries("/proc/self/fd"))
        {
            string? target = null;
            try
            {
                target = new FileInfo(entry).LinkTarget;
            }
            catch (IOException)
            {
            }
            if (target is not null && (target.StartsWith("socket:", StringComparison.Ordinal) || target.Contains("[io_uring]", StringComparison.Ordinal) || target.Contains("[eventfd]", StringComparison.Ordinal)))
            {
                set.Add(int.Parse(Path.GetFileName(entry), System.Globalization.CultureInfo.InvariantCulture));
            }
        }
        return set;
    }

    [Fact]
    public async Task Stopping_with_a_thousand_requests_in_flight_closes_every_fd()
    {
        int fdsBefore = FdCount.Owned();
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        // The server accepts and never reads: every client's request stays in flight.
        var accepted = new List<IoUringConnection>();
        Task acceptAll = Task.Run(async () =>
        {
            while (await listener.AcceptAsync() is { } c)
            {
                lock (accepted)
                {
                    accepted.Add(c);
                }
            }
        });
        var clients = new List<Socket>();
        for (int i = 0; i < 1000; i++)
        {
            var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            await client.ConnectAsync(listener.LocalEndPoint);
            await client.SendAsync(RandomNumberGenerator.GetBytes(1024));
            clients.Add(client);
        }
        for (int i = 0; i < 500 && network.ConnectionCount < 1000; i++)
        {
            await Task.Delay(10);
        }
        Assert.Equal(1000, network.ConnectionCount);

        // Bounded: a hang fails the test instead of stalling the run.
        await listener.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(30));
        await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(30));
        await acceptAll.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.All(accepted, c => Assert.True(c.Closed.IsCompleted));
        clients.ForEach(c => c.Dispose());
        Assert.Equal(fdsBefore, FdCount.Owned());
    }

    /// <summary>
    /// Mixed traffic at high concurrency for IOURING_SOAK_SECONDS (default 5; run it long locally): connections of
    /// every size and life span, resets among them. Afterwards fds, handles, blocks and memory are back to baseline.
    /// </summary>
    [Fact]
    public async Task Soak_mixed_traffic_returns_to_baseline()
    {
        int seconds = int.TryParse(Environment.GetEnvironmentVariable("IOURING_SOAK_SECONDS"), out int s) ? s : 5;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, Loop = { BufferCount = 64, BufferSize = 4096 } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        await RunMixedAsync(network, listener.LocalEndPoint, TimeSpan.FromSeconds(1)); // warm up
        await Eventually.WaitForAsync(() => network.ConnectionCount == 0);
        int fds = FdCount.Owned();
        int owners = network.Loops.Sum(l => l.LiveOwners);
        int blocks = network.RentedMemoryBlocks;
        long rss = CurrentRss();
        long heap = GC.GetTotalMemory(forceFullCollection: true);
        int retained = network.RetainedMemoryBlocks;

        (long bytes, int connections) = await RunMixedAsync(network, listener.LocalEndPoint, TimeSpan.FromSeconds(seconds));
        output.WriteLine($"soak: {seconds} s, {connections} connections, {bytes} bytes echoed and checked");
        Assert.True(connections > 100, $"only {connections} connections");

        await Eventually.WaitForAsync(() => network.ConnectionCount == 0 && FdCount.Owned() == fds);
        Assert.Equal(fds, FdCount.Owned());
        Assert.Equal(owners, network.Loops.Sum(l => l.LiveOwners));
        Assert.Equal(blocks, network.RentedMemoryBlocks);
        Assert.Equal(0, network.Loops.Sum(l => l.Counters.ReceiveBuffersLost)); // every bundle's buffers were found and given back
        // Free pool blocks are kept for reuse (and trimmed when idle: PinnedBlockMemoryPool.Trim), not leaked.
        long poolGrowth = (long)(network.RetainedMemoryBlocks - retained) * PinnedBlockMemoryPool.BlockSize;
        long heapGrowth = GC.GetTotalMemory(forceFullCollection: true) - heap - poolGrowth;
        long rssGrowth = CurrentRss() - rss;
        // RSS also holds the test clients' buffers and the GC's retained segments, so the leak check is the managed
        // heap after a full collection (native memory is fixed: rings and buffer rings are allocated per loop).
        output.WriteLine($"soak: heap grew {heapGrowth / 1024} KiB besides {poolGrowth / 1024} KiB of free pool blocks, RSS {rss / 1024} KiB before and {rssGrowth / 1024:+#;-#;0} KiB after; fds {fds}, owners {owners}, blocks {blocks} before and after");
        Assert.True(heapGrowth < 16L * 1024 * 1024, $"the managed heap grew by {heapGrowth / 1024} KiB over {connections} connections");
    }

    private static async Task<(long Bytes, int Connections)> RunMixedAsync(IoUringNetwork network, EndPoint endPoint, TimeSpan duration)
    {
        var stopAt = Stopwatch.GetTimestamp() + (long)(duration.TotalSeconds * Stopwatch.Frequency);
        long bytes = 0;
        int connections = 0;
        await Task.WhenAll(Enumerable.Range(0, 64).Select(async worker =>
        {
            var random = new Random(worker);
            while (Stopwatch.GetTimestamp() < stopAt)
            {
                byte[] payload = RandomNumberGenerator.GetBytes(random.Next(4) switch { 0 => 0, 1 => random.Next(1, 200), 2 => random.Next(1, 64 * 1024), _ => random.Next(1, 1024 * 1024) });
                if (random.Next(10) == 0)
                {
                    // A peer that resets mid-stream.
                    using var rude = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                    await rude.ConnectAsync(endPoint);
                    await rude.SendAsync(payload.AsMemory(0, payload.Length / 2));
                    rude.LingerState = new LingerOption(true, 0);
                }
                else
                {
                    await using IoUringConnection connection = await network.ConnectAsync(endPoint);
                    byte[] echoed = await EchoTests.RoundTripAsync(connection.AsStream(), () => connection.Output.Complete(), payload, worker);
                    EchoTests.AssertSameBytes(payload, echoed);
                    Interlocked.Add(ref bytes, payload.Length);
                }
                Interlocked.Increment(ref connections);
            }
        }));
        return (bytes, connections);
    }

    private static long CurrentRss()
    {
        using var process = Process.GetCurrentProcess();
        process.Refresh();
        return process.WorkingSet64;
    }
}
