using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>
/// Coalesced receives (<see cref="IoUringUdpOptions.ReceiveCoalesced"/>, UDP_GRO) over loopback, where a segmented send
/// reaches a coalescing socket as one buffer: the receiver hands out exactly the datagrams sent, in order, each with its
/// source, through single receives and batches, also with two sources' bursts interleaved; mixed sizes and a short last
/// segment; and a socket without the option gets the same datagrams from the kernel uncoalesced.
/// </summary>
public sealed class CoalescedReceiveTests : NetworkTests
{
    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_segmented_burst_is_split_back_into_its_datagrams_in_order(bool coalesced)
    {
        await using IoUringUdpSocket receiver = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = coalesced });
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
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

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_coalescing_socket_cuts_datagrams_to_its_largest_size_and_says_so(bool coalesced)
    {
        // MaxDatagramSize holds for a coalescing socket too, though its buffers take 64 KiB bursts: a datagram over it
        // is cut and reported truncated, waiting in the queue (the bound on its memory) or taken at once.
        await using IoUringUdpSocket receiver = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = coalesced, MaxDatagramSize = 100 });
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = receiver.LocalEndPoint.Serialize();
        byte[] single = RandomNumberGenerator.GetBytes(300);
        byte[] burst = RandomNumberGenerator.GetBytes(300 * 4);
        await sender.SendToAsync(single, to);
        await sender.SendSegmentsToAsync(burst, 300, to);
        await Task.Delay(200); // all five wait in the receiver's queue
        var expected = new List<byte[]> { single[..100] };
        for (int i = 0; i < 4; i++)
        {
            expected.Add(burst[(300 * i)..(300 * i + 100)]);
        }

        var buffer = new byte[2048];
        foreach (byte[] cut in expected)
        {
            DatagramResult received = await receiver.ReceiveAsync(buffer).AsTask().WaitAsync(Timeout);
            Assert.True(received.Truncated);
            Assert.Equal(cut, buffer[..received.BytesReceived]);
        }
        ValueTask<DatagramResult> waiting = receiver.ReceiveAsync(buffer); // and one taken as it arrives
        await sender.SendToAsync(single, to);
        DatagramResult direct = await waiting.AsTask().WaitAsync(Timeout);
        Assert.True(direct.Truncated);
        Assert.Equal(single[..100], buffer[..direct.BytesReceived]);
    }

    [Fact]
    public async Task Interleaved_bursts_of_two_sources_are_split_back_each_datagram_with_its_own_source_in_order()
    {
        await using IoUringUdpSocket receiver = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = true });
        await using IoUringUdpSocket first = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        await using IoUringUdpSocket second = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        IoUringUdpSocket[] senders = [first, second];
        SocketAddress to = receiver.LocalEndPoint.Serialize();
        var sent = new[] { new Queue<byte[]>(), new Queue<byte[]>() };
        var buffer = new byte[2048];
        var from = new SocketAddress(AddressFamily.InterNetwork);
        for (int round = 0; round < 8; round++) // a round at a time: the kernel's socket buffer holds a round
        {
            for (int source = 0; source < 2; source++)
            {
                int size = source == 0 ? 1200 : 1000; // a size per source: a datagram split at the other's is caught
                byte[] bytes = RandomNumberGenerator.GetBytes(size * (8 + round) - 7 * source);
                await senders[source].SendSegmentsToAsync(bytes, size, to);
                for (int offset = 0; offset < bytes.Length; offset += size)
                {
                    sent[source].Enqueue(bytes[offset..Math.Min(offset + size, bytes.Length)]);
                }
            }
            for (int left = sent.Sum(q => q.Count); left > 0; left--)
            {
                DatagramResult received = await receiver.ReceiveFromAsync(buffer, from).AsTask().WaitAsync(Timeout);
                EndPoint source = new IPEndPoint(IPAddress.Any, 0).Create(from);
                int index = Array.FindIndex(senders, s => s.LocalEndPoint.Equals(source));
                Assert.True(index >= 0, $"a datagram from {source}, neither sender");
                Assert.True(sent[index].TryDequeue(out byte[]? expected), $"more from {source} than it sent");
                Assert.Equal(expected, buffer[..received.BytesReceived]); // each source's datagrams in its order
            }
        }
        Assert.All(sent, q => Assert.Empty(q));
        Assert.True(receiver.CoalescedReceives > 0, "the kernel coalesced nothing: GRO was not exercised");
    }

    [Fact]
    public async Task Batches_get_the_datagrams_of_a_coalesced_burst_one_by_one()
    {
        await using IoUringUdpSocket receiver = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = true });
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
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
        await using IoUringUdpSocket receiver = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { ReceiveCoalesced = true });
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
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
