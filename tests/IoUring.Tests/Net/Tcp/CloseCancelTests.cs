using System.Net;
using System.Net.Sockets;
using IoUring.Interop;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Net;

/// <summary>
/// Closing a connection cancels exactly its own requests, each by its user_data: a cancel that searches the ring by fd
/// makes the kernel walk every pending request of every connection on the loop, so with 10,000 idle connections open
/// each close cost ~100x more CPU than without (docs/benchmarks/log/2026-11-25-connections.md, "Closing with many connections open"). Every path that closes a connection
/// with requests in flight is driven here: the close must still complete, and no cancel may search by fd.
/// </summary>
public sealed class CloseCancelTests : IAsyncLifetime
{
    // Observes the SQEs before each submit (probability 0: nothing is failed).
    private readonly FaultInjector _observer = new([IORING_OP_NOP], [Errno.ECONNRESET], probability: 0, seed: 1);
    private IoUringNetwork _network = null!;
    private IoUringListener _listener = null!;

    public Task InitializeAsync()
    {
        _network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = 64 * 1024,
            Loop = { BufferCount = 4, BufferSize = 4096, Hooks = new() { Faults = _observer } },
        });
        _listener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        return Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        await _listener.DisposeAsync();
        await _network.DisposeAsync();
    }

    private Task<(Socket Client, IoUringConnection Server)> ConnectPairAsync() => LoopbackPairs.ConnectAsync(_listener);

    private static Task Closed(IoUringConnection server) => server.Closed.WaitAsync(TimeSpan.FromSeconds(10));

    [Fact]
    public async Task Every_close_path_completes_without_a_cancel_that_searches_the_ring_by_fd()
    {
        // Idle: the receive and the hang-up poll are armed when the application disposes the connection.
        (Socket idleClient, IoUringConnection idle) = await ConnectPairAsync();
        await idle.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal(0, await idleClient.ReceiveAsync(new byte[1])); // the server's FIN
        idleClient.Dispose();

        // Aborted while a send waits for room: the client never reads, so the send stays in flight.
        (Socket stalledClient, IoUringConnection stalled) = await ConnectPairAsync();
        stalledClient.ReceiveBufferSize = 4096;
        _ = stalled.Output.WriteAsync(new byte[16 * 1024 * 1024]).AsTask();
        await Task.Delay(200);
        stalled.Abort();
        await Closed(stalled);
        stalledClient.Dispose();

        // Aborted while paused: Input is full, its receive was cancelled for backpressure, the hang-up poll is armed.
        (Socket floodClient, IoUringConnection paused) = await ConnectPairAsync();
        var flood = new byte[256 * 1024];
        _ = floodClient.SendAsync(flood).ContinueWith(static _ => { });
        await Task.Delay(200);
        paused.Abort();
        await Closed(paused);
        floodClient.Dispose();

        // The peer resets: the hang-up poll fires and the receive fails.
        (Socket resetClient, IoUringConnection reset) = await ConnectPairAsync();
        resetClient.LingerState = new LingerOption(true, 0);
        resetClient.Close();
        await Assert.ThrowsAsync<IOException>(async () => await reset.Input.ReadAsync()); // may throw before awaiting
        await reset.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));

        // Graceful both ways: the peer's FIN ends the receive, the server's Output completes.
        (Socket finClient, IoUringConnection fin) = await ConnectPairAsync();
        finClient.Shutdown(SocketShutdown.Send);
        while (true)
        {
            System.IO.Pipelines.ReadResult read = await fin.Input.ReadAsync();
            fin.Input.AdvanceTo(read.Buffer.End);
            if (read.IsCompleted)
            {
                break;
            }
        }
        await fin.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        finClient.Dispose();

        // Receives backing off: four 4 KiB ring buffers for eight flooding peers nobody reads, so ENOBUFS and its
        // 10 ms TIMEOUT before a re-arm come often; every connection closes whichever request it has in flight.
        var pairs = new List<(Socket Client, IoUringConnection Server)>();
        for (int i = 0; i < 8; i++)
        {
            pairs.Add(await ConnectPairAsync());
        }
        foreach ((Socket client, _) in pairs)
        {
            _ = client.SendAsync(flood).ContinueWith(static _ => { });
        }
        await Task.Delay(100);
        foreach ((_, IoUringConnection server) in pairs)
        {
            server.Abort();
        }
        foreach ((Socket client, IoUringConnection server) in pairs)
        {
            await Closed(server);
            client.Dispose();
        }

        Assert.Equal(0, _observer.FdCancels);
    }

    [Theory]
    [InlineData(1)]
    [InlineData(2)]
    [InlineData(3)]
    [InlineData(4)]
    public async Task A_close_whose_cancels_or_close_the_loop_refuses_an_sqe_for_still_completes(int refused)
    {
        // The loop refuses the next requests asked for (as when the SQ stays full after an early submit): the close's
        // cancels of the receive and the hang-up poll, then its CLOSE. Each is retried; the close used to wait for ever.
        var faults = new FaultInjector([IORING_OP_NOP], [Errno.ECONNRESET], probability: 0, seed: 1);
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { Hooks = new() { Faults = faults } } });
        try
        {
            await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
            (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
            using (client)
            {
                await Task.Delay(50); // receiving has started (it starts once accepted)
                faults.RefuseSqes(refused);
                server.Abort();
                await Closed(server); // hang guard
                Assert.Equal(refused, faults.SqesRefused);
            }
        }
        finally
        {
            faults.RefuseSqes(0);
            await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)); // it waits for its connections
        }
    }
}
