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
/// process-wide one), per loop, and its counts stay there after it is disposed.
/// </summary>
[Collection(GlobalMeterCollection.Name)]
public sealed class NetworkMeterTests
{
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
}
