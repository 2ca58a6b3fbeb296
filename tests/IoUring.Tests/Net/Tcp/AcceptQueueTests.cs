using System.Net;
using System.Net.Sockets;
using IoUring.Net;
using IoUring.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.Tests.Net;

/// <summary>What the listener does when the application accepts slowly or the listening socket breaks.</summary>
[Collection(FdCountingCollection.Name)]
public sealed class AcceptQueueTests(ITestOutputHelper output)
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(10);

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Multishot_and_single_shot_accept_serve_every_connection(bool multishot)
    {
        // 300 clients, 64 at a time, each echoed and closed: the same either way, but a single-shot acceptor submits
        // one ACCEPT per connection and a multishot one only re-arms when the kernel ends its request.
        const int Loops = 2, Clients = 300, Concurrency = 64;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = Loops, MultishotAccept = multishot });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        await Task.WhenAll(Enumerable.Range(0, Concurrency).Select(async worker =>
        {
            for (int i = worker; i < Clients; i += Concurrency)
            {
                using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                await client.ConnectAsync(listener.LocalEndPoint);
                byte[] payload = Payload(i, 128);
                byte[] echoed = await EchoTests.RoundTripAsync(new NetworkStream(client), () => client.Shutdown(SocketShutdown.Send), payload, i);
                EchoTests.AssertSameBytes(payload, echoed);
            }
        })).WaitAsync(TimeSpan.FromSeconds(60));
        output.WriteLine($"multishot {multishot}: {listener.AcceptRequests} ACCEPT requests for {Clients} connections on {Loops} loops");
        if (multishot)
        {
            Assert.InRange(listener.AcceptRequests, Loops, Clients / 10);
        }
        else
        {
            Assert.InRange(listener.AcceptRequests, Clients + Loops - 1, Clients + Loops);
        }
    }

    [Fact]
    public async Task A_flood_against_an_application_that_does_not_accept_is_held_to_the_backlog()
    {
        const int Backlog = 16, Loops = 2, Clients = 100, Length = 64 * 1024;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = Loops, Backlog = Backlog });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var clients = new Socket[Clients];
        for (int i = 0; i < Clients; i++)
        {
            clients[i] = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            byte[] payload = Payload(i, Length);
            Socket client = clients[i];
            _ = Task.Run(async () =>
            {
                try
                {
                    await client.ConnectAsync(listener.LocalEndPoint);
                    await client.SendAsync(payload.AsMemory());
                    client.Shutdown(SocketShutdown.Send);
                }
                catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
                {
                    // one the kernel dropped, or the test is over
                }
            });
        }
        try
        {
            // Nobody accepts: watch what the process takes meanwhile.
            int most = 0, mostBlocks = 0;
            for (int i = 0; i < 50; i++)
            {
                most = Math.Max(most, network.ConnectionCount);
                mostBlocks = Math.Max(mostBlocks, network.RentedMemoryBlocks);
                await Task.Delay(20);
            }
            output.WriteLine($"while nobody accepted: at most {most} connections taken from the kernel, {mostBlocks} memory blocks rented");
            // One multishot accept per loop drains the kernel's queue (at most Backlog + 1) in one go before it sees the
            // queue is full: that is the slack.
            Assert.InRange(most, 1, Backlog + Loops * (Backlog + 1));
            Assert.Equal(0, mostBlocks); // nothing is received for a connection the application has not accepted

            // Accepting still works and every byte arrives: the connections held, then those the kernel queued meanwhile.
            // (Clients beyond both queues are the kernel's: as with Sockets, a listen queue that overflows for long
            // drops some of them.)
            int held = network.ConnectionCount;
            var seen = new HashSet<int>();
            for (int i = 0; i < held + Backlog; i++)
            {
                IoUringConnection? server = await listener.AcceptAsync().AsTask().WaitAsync(s_hangGuard);
                Assert.NotNull(server);
                await using (server)
                {
                    byte[] received = await ReadToEndAsync(server);
                    Assert.Equal(Length, received.Length);
                    int index = received[0] | received[1] << 8;
                    Assert.True(seen.Add(index));
                    Assert.Equal(Payload(index, Length), received);
                }
            }
        }
        finally
        {
            foreach (Socket client in clients)
            {
                client.Dispose();
            }
        }
    }

    [Fact]
    public async Task Accept_on_a_socket_that_stopped_listening_does_not_spin_and_AcceptAsync_reports_it()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        Socket socket = IoUringNetwork.CreateListeningSocket(new IPEndPoint(IPAddress.Loopback, 0), 16);
        await using IoUringListener listener = network.Listen(socket, 16);
        ValueTask<IoUringConnection?> accept = listener.AcceptAsync();
        long sqes = network.Loops[0].Counters.Sqes;

        socket.Shutdown(SocketShutdown.Receive); // Linux: the socket stops listening, accept fails with EINVAL
        await Task.Delay(500);

        long armed = network.Loops[0].Counters.Sqes - sqes;
        output.WriteLine($"{armed} SQEs in 500 ms after the listening socket stopped listening");
        Assert.True(armed < 20, $"{armed} SQEs in 500 ms: the acceptor is spinning");
        SocketException error = await Assert.ThrowsAsync<SocketException>(() => accept.AsTask().WaitAsync(s_hangGuard));
        Assert.Equal(SocketError.InvalidArgument, error.SocketErrorCode);
        await Assert.ThrowsAsync<SocketException>(() => listener.AcceptAsync().AsTask().WaitAsync(s_hangGuard));
    }

    private static byte[] Payload(int index, int length)
    {
        byte[] payload = new byte[length];
        new Random(index).NextBytes(payload);
        payload[0] = (byte)index;
        payload[1] = (byte)(index >> 8);
        return payload;
    }

    private static async Task<byte[]> ReadToEndAsync(IoUringConnection connection)
    {
        var received = new MemoryStream();
        while (true)
        {
            System.IO.Pipelines.ReadResult result = await connection.Input.ReadAsync().AsTask().WaitAsync(s_hangGuard);
            foreach (ReadOnlyMemory<byte> segment in result.Buffer)
            {
                received.Write(segment.Span);
            }
            connection.Input.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                return received.ToArray();
            }
        }
    }
}
