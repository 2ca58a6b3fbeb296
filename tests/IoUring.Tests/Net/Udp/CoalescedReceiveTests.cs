using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;

namespace IoUring.Tests.Net;

/// <summary>
/// Coalesced receives (<see cref="IoUringUdpOptions.ReceiveCoalesced"/>, UDP_GRO) over loopback, where a segmented send
/// reaches a coalescing socket as one buffer: the receiver hands out exactly the datagrams sent, in order, each with its
/// source, through single receives and batches; mixed sizes and a short last segment; and a socket without the option
/// gets the same datagrams from the kernel uncoalesced.
/// </summary>
public sealed class CoalescedReceiveTests : IAsyncLifetime
{
    private static readonly TimeSpan Timeout = TimeSpan.FromSeconds(10);
    private IoUringNetwork _network = null!;

    public Task InitializeAsync()
    {
        _network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        return Task.CompletedTask;
    }

    public async Task DisposeAsync() => await _network.DisposeAsync();

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_segmented_burst_is_split_back_into_its_datagrams_in_order(bool coalesced)
    {
        await using IoUringUdpSocket receiver = _network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = coalesced });
        await using IoUringUdpSocket sender = _network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = receiver.LocalEndPoint.Serialize();
        var sent = new List<byte[]>();
        foreach ((int size, int count) in new[] { (1200, 40), (1450, 7), (300, 64) })
        {
            byte[] burst = RandomNumberGenerator.GetBytes(size * count - size / 3); // a short last segment
            await sender.SendSegmentsToAsync(burst, size, to);
            for (int offset = 0; offset < burst.Length; offset += size)
            {
                sent.Add(burst[offset..Math.Min(offset + size, burst.Length)]);
            }
        }

        var buffer = new byte[2048];
        var from = new SocketAddress(AddressFamily.InterNetwork);
        foreach (byte[] expected in sent)
        {
            DatagramResult received = await receiver.ReceiveFromAsync(buffer, from).AsTask().WaitAsync(Timeout);
            Assert.False(received.Truncated);
            Assert.Equal(expected, buffer[..received.BytesReceived]);
            Assert.Equal(sender.LocalEndPoint, new IPEndPoint(IPAddress.Any, 0).Create(from));
        }
        Assert.Equal(sent.Count, receiver.DatagramsReceived);
        if (coalesced)
        {
            Assert.True(receiver.CoalescedReceives > 0, "the kernel coalesced nothing: GRO was not exercised");
        }
        else
        {
            Assert.Equal(0, receiver.CoalescedReceives);
        }
    }

    [Fact]
    public async Task Batches_get_the_datagrams_of_a_coalesced_burst_one_by_one()
    {
        await using IoUringUdpSocket receiver = _network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = true });
        await using IoUringUdpSocket sender = _network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        byte[] burst = RandomNumberGenerator.GetBytes(1200 * 50);
        await sender.SendSegmentsToAsync(burst, 1200, receiver.LocalEndPoint.Serialize());

        var batch = new UdpDatagramBatch(16, 2048);
        int offset = 0;
        while (offset < burst.Length)
        {
            int count = await receiver.ReceiveBatchAsync(batch).AsTask().WaitAsync(Timeout);
            for (int i = 0; i < count; i++)
            {
                Assert.Equal(1200, batch.GetResult(i).BytesReceived);
                Assert.True(burst.AsSpan(offset, 1200).SequenceEqual(batch.GetPayload(i).Span), $"datagram at {offset}");
                offset += 1200;
            }
        }
        Assert.True(receiver.CoalescedReceives > 0);
    }

    [Fact]
    public async Task A_datagram_longer_than_the_callers_buffer_is_still_reported_cut()
    {
        await using IoUringUdpSocket receiver = _network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = true });
        await using IoUringUdpSocket sender = _network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        byte[] burst = RandomNumberGenerator.GetBytes(1000 * 4);
        await sender.SendSegmentsToAsync(burst, 1000, receiver.LocalEndPoint.Serialize());
        var small = new byte[600];
        for (int i = 0; i < 4; i++)
        {
            DatagramResult received = await receiver.ReceiveAsync(small).AsTask().WaitAsync(Timeout);
            Assert.True(received.Truncated);
            Assert.Equal(600, received.BytesReceived);
            Assert.Equal(1000, received.DatagramLength);
            Assert.True(burst.AsSpan(i * 1000, 600).SequenceEqual(small));
        }
    }
}
