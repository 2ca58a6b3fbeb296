using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;
using IoUring.Tests.Support;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Diagnostics;

/// <summary>
/// The "IoUring" meter of a plain <see cref="IoUringNetwork"/> (no Kestrel), read through a MeterListener: a network
/// publishes its loops' counters on the meter of its <see cref="IoUringNetworkOptions.MeterFactory"/> (or the
/// process-wide one), per loop, and its counts stay there after it is disposed; its UDP sockets' datagrams, bytes,
/// drops, truncations and offloads are on their own loop's series, apart from the connections' bytes.
/// </summary>
[Collection(GlobalMeterCollection.Name)]
public sealed class NetworkMeterTests
{
    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(10);

    [Fact]
    public async Task A_plain_networks_udp_traffic_is_on_the_global_meter_by_loop_and_direction_and_not_in_the_connection_bytes()
    {
        using var global = new MeterReader(meterFactory: null);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        // A queue of one behind coalesced receives (UDP_GRO): a segmented burst arrives as one receive, of which the
        // queue keeps one datagram and drops the rest.
        await using IoUringUdpSocket receiver = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = true, ReceiveQueueCapacity = 1 });
        await using IoUringUdpSocket sender = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        Assert.NotSame(receiver.Loop, sender.Loop); // round robin: each direction on its own loop
        int r = network.Loops.ToList().IndexOf(receiver.Loop), s = network.Loops.ToList().IndexOf(sender.Loop);
        SocketAddress to = receiver.LocalEndPoint.Serialize();
        IReadOnlyDictionary<string, long> before = global.Read();

        // One segmented send (UDP_SEGMENT) of 10 datagrams: one coalesced receive, 1 queued, 9 dropped.
        await sender.SendSegmentsToAsync(Pattern(10 * 1000, 1), 1000, to);
        await Eventually.WaitForAsync(() => receiver.DatagramsReceived == 10);
        Assert.Equal(9, receiver.DatagramsDropped); // the burst came in one receive, as the kernel coalesces on loopback
        // The queued one, cut by a small buffer as this thread copies it out.
        var small = new byte[100];
        var from = new SocketAddress(AddressFamily.InterNetwork);
        Assert.True((await receiver.ReceiveFromAsync(small, from).AsTask().WaitAsync(Timeout)).Truncated);
        // A waiting receive, then a waiting batch, each given a datagram longer than its buffer: cut by the loop's copy.
        ValueTask<DatagramResult> waiting = receiver.ReceiveFromAsync(small, from);
        Assert.False(waiting.IsCompleted);
        await sender.SendToAsync(Pattern(500, 2), to);
        Assert.True((await waiting.AsTask().WaitAsync(Timeout)).Truncated);
        var batch = new UdpDatagramBatch(4, 64);
        ValueTask<int> filling = receiver.ReceiveBatchAsync(batch);
        Assert.False(filling.IsCompleted);
        await sender.SendToAsync(Pattern(200, 3), to);
        Assert.Equal(1, await filling.AsTask().WaitAsync(Timeout));
        Assert.True(batch.GetResult(0).Truncated);

        var expected = new Dictionary<string, long>
        {
            [$"iouring.udp.datagrams/{r}/receive"] = 12,
            [$"iouring.udp.datagrams/{s}/receive"] = 0,
            [$"iouring.udp.datagrams/{s}/transmit"] = 12,
            [$"iouring.udp.datagrams/{r}/transmit"] = 0,
            [$"iouring.udp.io/{r}/receive"] = 10_000 + 500 + 200,
            [$"iouring.udp.io/{s}/transmit"] = 10_000 + 500 + 200,
            [$"iouring.udp.dropped/{r}"] = 9,
            [$"iouring.udp.truncated/{r}"] = 3,
            [$"iouring.udp.segment_offloads/{s}"] = 1,
            [$"iouring.udp.coalesced_receives/{r}"] = 1,
            [$"iouring.udp.dropped/{s}"] = 0,
            [$"iouring.udp.truncated/{s}"] = 0,
            [$"iouring.udp.segment_offloads/{r}"] = 0,
            [$"iouring.udp.coalesced_receives/{s}"] = 0,
            // UDP's bytes are not the connections'.
            [$"iouring.connection.io/{r}/receive"] = 0,
            [$"iouring.connection.io/{s}/transmit"] = 0,
        };
        string[] Deltas()
        {
            IReadOnlyDictionary<string, long> now = global.Read();
            return expected.Keys.Order()
                .Select(key => $"{key} {now.GetValueOrDefault(key, -1) - before.GetValueOrDefault(key)}").ToArray();
        }
        string[] wanted = expected.Keys.Order().Select(key => $"{key} {expected[key]}").ToArray();
        // Sends count at their completion on the loop, which may come after the receiver has the datagrams.
        await Eventually.WaitForAsync(() => Deltas().SequenceEqual(wanted));
        Assert.Equal(wanted, Deltas());
    }

    [Fact]
    public async Task A_network_with_its_own_meter_factory_publishes_there_and_not_on_the_global_meter()
    {
        using var meterFactory = new TestMeterFactory();
        using var own = new MeterReader(meterFactory);
        using var global = new MeterReader(meterFactory: null);
        IReadOnlyDictionary<string, long> globalBefore = global.Read();
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, MeterFactory = meterFactory });
        await using (network)
        {
            await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
            (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
            await using (server)
            using (client)
            {
                await client.SendAsync(Pattern(1000, 1));
                ReadResult read = await server.Input.ReadAtLeastAsync(1000);
                server.Input.AdvanceTo(read.Buffer.End);
                int loop = network.Loops.ToList().IndexOf(server.Loop);
                string received = $"iouring.connection.io/{loop}/receive";
                await Eventually.WaitForAsync(() => own.Read().GetValueOrDefault(received) == 1000);

                IReadOnlyDictionary<string, long> mine = own.Read();
                Assert.Equal(1000, mine[received]);
                Assert.Equal(0, mine[$"iouring.connection.io/{1 - loop}/receive"]);
                Assert.True(mine["iouring.loop.cqes/0"] > 0 && mine["iouring.loop.cqes/1"] > 0);
            }
        }

        // Disposed: its counts stay (a counter never goes back), and none of them ever reached the global meter.
        IReadOnlyDictionary<string, long> kept = own.Read();
        Assert.Equal(1000, kept["iouring.connection.io/0/receive"] + kept["iouring.connection.io/1/receive"]);
        IReadOnlyDictionary<string, long> globalAfter = global.Read();
        Assert.All(globalAfter, series => Assert.Equal(globalBefore.GetValueOrDefault(series.Key), series.Value));
    }

    [Fact]
    public async Task A_meter_factory_that_throws_leaves_no_loop_running()
    {
        // A host's factory disposed already throws ObjectDisposedException from Create (DefaultMeterFactory does).
        const string ThreadName = "iou-meter-odx"; // unique: the loops' threads are "iou-meter-odx 0" and "... 1"
        Assert.Throws<ObjectDisposedException>(() => new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 2, MeterFactory = new DisposedMeterFactory(), Loop = { ThreadName = ThreadName },
        }));

        // A loop left behind runs for good; one stopped ends within moments.
        await Eventually.WaitForAsync(() => !LoopThreads(ThreadName).Any());
        Assert.Empty(LoopThreads(ThreadName));
    }

    [NopInjectFact] // every RECVMSG fails through the fault injector
    public async Task A_udp_sockets_own_buffer_ring_running_dry_counts_in_the_loops_buffer_ring_exhaustions()
    {
        using var meterFactory = new TestMeterFactory();
        using var meter = new MeterReader(meterFactory);
        // Every RECVMSG finds the socket's own buffer ring empty (ENOBUFS), as a flood it cannot keep up with would.
        var faults = new IoUring.Testing.FaultInjector(
            [IoUring.Interop.IoUringConstants.IORING_OP_RECVMSG], [IoUring.Interop.Errno.ENOBUFS], probability: 1, seed: 1);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1, MeterFactory = meterFactory, Loop = { Hooks = new() { Faults = faults } },
        });
        await using IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        await Eventually.WaitForAsync(() => socket.ReceiveExhaustions >= 3);
        Assert.True(socket.ReceiveExhaustions >= 3);

        long counted = meter.Read()["iouring.loop.buffer_ring_exhaustions/0"];
        Assert.True(counted >= 3, $"the loop's buffer_ring_exhaustions is {counted}; the socket's ring ran dry 3 times or more");
    }

    [Fact]
    public async Task A_network_whose_dispose_fails_is_let_go_by_the_meter()
    {
        using var meterFactory = new TestMeterFactory();
        WeakReference network = await DisposeFailingAsync(meterFactory);

        // The meter (alive with its factory) holds no network it has not retired. Polled: the stopped loop's thread may
        // still be unwinding frames that reach the network when DisposeAsync has already thrown.
        await Eventually.WaitForAsync(() =>
        {
            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            return !network.IsAlive;
        });
        Assert.False(network.IsAlive, "the meter still holds the network whose dispose failed");
    }

    /// <summary>A network whose dispose throws as if a loop's stop failed (not inlined: no local keeps it).</summary>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static async Task<WeakReference> DisposeFailingAsync(TestMeterFactory meterFactory)
    {
        var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MeterFactory = meterFactory,
            Loop = { Hooks = new() { AfterLoopsStopped = () => throw new InvalidOperationException("stop failed") } },
        });
        InvalidOperationException error =
            await Assert.ThrowsAsync<InvalidOperationException>(() => network.DisposeAsync().AsTask());
        Assert.Equal("stop failed", error.Message);
        return new WeakReference(network);
    }

    /// <summary>The names of this process's threads that start with <paramref name="prefix"/>.</summary>
    private static string[] LoopThreads(string prefix)
        => Directory.GetDirectories("/proc/self/task")
            .Select(task =>
            {
                try
                {
                    return File.ReadAllText(Path.Combine(task, "comm")).Trim();
                }
                catch (IOException)
                {
                    return ""; // the thread ended meanwhile
                }
            })
            .Where(name => name.StartsWith(prefix, StringComparison.Ordinal))
            .ToArray();

    private sealed class DisposedMeterFactory : System.Diagnostics.Metrics.IMeterFactory
    {
        public System.Diagnostics.Metrics.Meter Create(System.Diagnostics.Metrics.MeterOptions options)
            => throw new ObjectDisposedException(nameof(DisposedMeterFactory));

        public void Dispose()
        {
        }
    }
}
