using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Interop;
using IoUring.Net;
using IoUring.Testing;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Net;

/// <summary>
/// Segmented UDP sends (<see cref="IoUringUdpSocket.SendSegmentsToAsync"/>, UDP_SEGMENT): a System.Net.Sockets peer
/// receives exactly the datagrams the buffer makes, one by one, in order, for 1 to 64 segments and a short last one;
/// where the kernel refuses to segment (UDP checksums switched off: EINVAL) the same datagrams arrive one SENDMSG each;
/// bad segment sizes are refused before anything is sent; a close with segmented sends in flight loses nothing queued.
/// </summary>
public sealed class SegmentOffloadTests : NetworkTests
{
    private const int SolSocket = 1;  // SOL_SOCKET (SocketOptionLevel.Socket is Windows' 0xffff)
    private const int SoNoCheck = 11; // SO_NO_CHECK: the kernel refuses UDP_SEGMENT on such a socket (EINVAL)

    [Theory]
    [InlineData(1200, 1, 0)]
    [InlineData(1200, 2, 0)]
    [InlineData(1200, 10, 17)]     // a short last segment
    [InlineData(1450, 44, 1)]      // 63,801 B: near the 64 KiB limit
    [InlineData(1000, 64, 0)]      // the most segments one send makes
    [InlineData(1, 64, 0)]
    public async Task The_peer_receives_each_segment_as_a_datagram_in_order(int segmentSize, int fullSegments,
        int lastLength)
    {
        using Socket peer = BoundPeer();
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        byte[] payload = RandomNumberGenerator.GetBytes(segmentSize * fullSegments + lastLength);

        int sent = await sender.SendSegmentsToAsync(payload, segmentSize, peer.LocalEndPoint!.Serialize());

        Assert.Equal(payload.Length, sent);
        await AssertReceivedAsync(peer, payload, segmentSize);
        // The send completed when it was queued, and the peer may have the datagrams before the loop has handled the
        // SENDMSG's completion, where it counts: wait for that.
        int datagrams = fullSegments + (lastLength > 0 ? 1 : 0);
        await Eventually.WaitForAsync(() => sender.DatagramsSent == datagrams);
        Assert.Equal(fullSegments + (lastLength > 0 ? 1 : 0) > 1 ? 1 : 0, sender.SegmentOffloads);
        Assert.Equal(fullSegments + (lastLength > 0 ? 1 : 0), sender.DatagramsSent);
    }

    [Fact]
    public async Task Where_the_kernel_refuses_to_segment_the_same_datagrams_go_one_by_one()
    {
        using Socket peer = BoundPeer();
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        RefuseSegmenting(sender);
        for (int round = 0; round < 3; round++)
        {
            byte[] payload = RandomNumberGenerator.GetBytes(1200 * 7 + 300);
            Assert.Equal(payload.Length, await sender.SendSegmentsToAsync(payload, 1200, peer.LocalEndPoint!.Serialize()));
            await AssertReceivedAsync(peer, payload, 1200);
        }
        await Eventually.WaitForAsync(() => sender.DatagramsSent == 3 * 8); // counted at each completion, on the loop
        Assert.Equal(0, sender.SegmentOffloads);
        Assert.Equal(3 * 8, sender.DatagramsSent);
    }

    [Fact]
    public async Task A_connected_socket_sends_segments_to_its_peer()
    {
        using Socket peer = BoundPeer();
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        sender.Connect(peer.LocalEndPoint!);
        byte[] payload = RandomNumberGenerator.GetBytes(1400 * 20);
        Assert.Equal(payload.Length, await sender.SendSegmentsAsync(payload, 1400));
        await AssertReceivedAsync(peer, payload, 1400);
    }

    [Fact]
    public async Task Bad_segment_sizes_are_refused_before_anything_is_sent()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = new IPEndPoint(IPAddress.Loopback, 9).Serialize();
        Assert.Throws<ArgumentOutOfRangeException>(() => sender.SendSegmentsToAsync(new byte[100], 0, to));
        Assert.Throws<ArgumentOutOfRangeException>(() => sender.SendSegmentsToAsync(new byte[100], 70_000, to));
        ArgumentOutOfRangeException tooMany = Assert.Throws<ArgumentOutOfRangeException>(
            () => sender.SendSegmentsToAsync(new byte[65 * 100], 100, to));
        Assert.Contains("65 datagrams", tooMany.Message, StringComparison.Ordinal);
        Assert.Equal(0, sender.DatagramsSent);
    }

    [Fact]
    public async Task A_close_with_segmented_sends_queued_delivers_them_and_frees_everything()
    {
        using Socket peer = BoundPeer();
        peer.ReceiveBufferSize = 4 * 1024 * 1024;
        IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        byte[] payload = RandomNumberGenerator.GetBytes(1200 * 40);
        var sends = new List<ValueTask<int>>();
        for (int i = 0; i < 20; i++)
        {
            sends.Add(sender.SendSegmentsToAsync(payload, 1200, to));
        }
        await sender.DisposeAsync();
        foreach (ValueTask<int> send in sends)
        {
            Assert.Equal(payload.Length, await send);
        }
        Assert.Equal(20 * 40, sender.DatagramsSent);
        Assert.Equal(0, sender.Sender.Pending);
    }

    [Fact]
    public async Task A_close_while_refused_sends_go_one_by_one_still_delivers_every_datagram()
    {
        using Socket peer = BoundPeer();
        peer.ReceiveBufferSize = 4 * 1024 * 1024;
        IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        RefuseSegmenting(sender);
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        byte[] payload = RandomNumberGenerator.GetBytes(1200 * 8);
        for (int i = 0; i < 10; i++)
        {
            Assert.Equal(payload.Length, await sender.SendSegmentsToAsync(payload, 1200, to)); // reported sent
        }
        await sender.DisposeAsync(); // "sends already queued still complete"
        Assert.Equal(10 * 8, sender.DatagramsSent);
    }

    [NopInjectTheory]
    [InlineData(false)] // the kernel fails the third datagram's SENDMSG
    [InlineData(true)]  // the loop has no SQE for it (ENOBUFS)
    public async Task A_datagram_failing_partway_through_one_by_one_leaves_the_send_with_the_bytes_that_went(
        bool noSqe)
    {
        var faults = new FaultInjector([], [Errno.EBADR], probability: 0, seed: 1);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1, Loop = { Hooks = new() { Faults = faults } },
        });
        using Socket peer = BoundPeer();
        await using IoUringUdpSocket sender = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 }); // the caller waits for the send's result
        RefuseSegmenting(sender);
        // SENDMSGs in order: the refused UDP_SEGMENT one, then datagrams 1, 2 and 3, which fails.
        if (noSqe)
        {
            faults.RefuseSqes(1, after: 3);
        }
        else
        {
            faults.FailSqe(IORING_OP_SENDMSG, after: 3, Errno.EPERM);
        }
        byte[] payload = RandomNumberGenerator.GetBytes(1200 * 5);
        SocketAddress to = peer.LocalEndPoint!.Serialize();

        Assert.Equal(2 * 1200, await sender.SendSegmentsToAsync(payload, 1200, to).AsTask().WaitAsync(Timeout));
        await AssertReceivedAsync(peer, payload.AsSpan(0, 2 * 1200).ToArray(), 1200);
        Assert.Equal(2, sender.DatagramsSent);

        // Nothing is left for the next send, which goes whole.
        Assert.Equal(payload.Length, await sender.SendSegmentsToAsync(payload, 1200, to).AsTask().WaitAsync(Timeout));
        await AssertReceivedAsync(peer, payload, 1200);
    }

    [Fact]
    public async Task A_later_send_can_arrive_between_the_datagrams_of_a_segmented_send_going_one_by_one()
    {
        // Each datagram going one by one is submitted after the previous one's completion, while a later send is
        // submitted at once: what the socket documents (UDP does not keep order either), shown here.
        using Socket peer = BoundPeer();
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        RefuseSegmenting(sender);
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        byte[] burst = RandomNumberGenerator.GetBytes(1200 * 3);
        await sender.SendSegmentsToAsync(burst, 1200, to); // refused: sends of this size go one by one from now on
        await AssertReceivedAsync(peer, burst, 1200);

        byte[] single = RandomNumberGenerator.GetBytes(100);
        var submitted = new TaskCompletionSource<(Task<int>, Task<int>)>();
        // On the loop, so that both are submitted in one iteration, in this order.
        sender.Loop.Schedule(_ => submitted.SetResult(
            (sender.SendSegmentsToAsync(burst, 1200, to).AsTask(), sender.SendToAsync(single, to).AsTask())), null);
        (Task<int> segmented, Task<int> later) = await submitted.Task.WaitAsync(Timeout);
        Assert.Equal(burst.Length, await segmented);
        Assert.Equal(single.Length, await later);

        var buffer = new byte[2048];
        byte[][] expected = [burst[..1200], single, burst[1200..2400], burst[2400..]];
        foreach (byte[] datagram in expected)
        {
            int received = await peer.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(Timeout);
            Assert.Equal(datagram, buffer[..received]);
        }
    }

    [Fact]
    public async Task A_send_failing_for_its_source_address_leaves_later_sends_of_its_segment_size_offloaded()
    {
        // IPv6: ip6_datagram_send_ctl refuses a source the host does not have with EINVAL, as udp_send_skb refuses
        // some segmenting: that the datagrams alone fail the same way says the segmenting was not the cause.
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.IPv6Loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 }); // each caller gets its own send's result
        using var peer = new Socket(AddressFamily.InterNetworkV6, SocketType.Dgram, ProtocolType.Udp);
        peer.Bind(new IPEndPoint(IPAddress.IPv6Loopback, 0));
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        SocketAddress notOurs = new IPEndPoint(IPAddress.Parse("2001:db8::7"), 0).Serialize(); // documentation prefix
        byte[] payload = RandomNumberGenerator.GetBytes(1200 * 4);

        var error = await Assert.ThrowsAsync<SocketException>(
            () => sender.SendSegmentsToAsync(payload, 1200, to, notOurs).AsTask().WaitAsync(Timeout));
        Assert.Equal(SocketError.InvalidArgument, error.SocketErrorCode);
        Assert.Equal(0, sender.DatagramsSent);

        Assert.Equal(payload.Length, await sender.SendSegmentsToAsync(payload, 1200, to).AsTask().WaitAsync(Timeout));
        await AssertReceivedAsync(peer, payload, 1200);
        Assert.Equal(1, sender.SegmentOffloads);
    }

    /// <summary>UDP checksums off: udp_send_skb refuses a GSO skb with EINVAL, a real refusal of this kernel.</summary>
    /// <summary>UDP checksums off (SO_NO_CHECK): the kernel refuses UDP_SEGMENT on the socket (EINVAL).</summary>
    internal static void RefuseSegmenting(IoUringUdpSocket sender)
    {
        using var handle = new Socket(new SafeSocketHandle(sender.FileDescriptor, ownsHandle: false));
        handle.SetRawSocketOption(SolSocket, SoNoCheck, BitConverter.GetBytes(1));
    }

    private static Socket BoundPeer()
    {
        var peer = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        return peer;
    }

    /// <summary>The peer gets <paramref name="payload"/> cut into datagrams of <paramref name="segmentSize"/>, in
    /// order, each compared byte for byte.</summary>
    internal static async Task AssertReceivedAsync(Socket peer, byte[] payload, int segmentSize)
    {
        var buffer = new byte[70_000];
        for (int offset = 0; offset < payload.Length; offset += segmentSize)
        {
            int expected = Math.Min(segmentSize, payload.Length - offset);
            int received = await peer.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(Timeout);
            Assert.Equal(expected, received);
            Assert.True(payload.AsSpan(offset, expected).SequenceEqual(buffer.AsSpan(0, received)),
                $"the datagram at offset {offset}");
        }
        Assert.Equal(0, peer.Available);
    }
}
