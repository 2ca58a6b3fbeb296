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
/// Segmented sends at the kernel's limits: the most one send carries over IPv4 (65,507 bytes) and IPv6 (65,527)
/// arriving datagram by datagram, one byte more refused with nothing sent; and over a veth pair between two namespaces
/// of the test's own (MTU 1,500), segments above the MTU refused by the kernel (EMSGSIZE) and sent one by one, fragmented
/// by IP, while segments below it are offloaded.
/// </summary>
public sealed class SegmentOffloadLimitTests
{
    [Theory]
    [InlineData("ipv4", 65_507)]
    [InlineData("ipv6", 65_527)]
    [InlineData("dual", 65_507)] // a dual-mode socket sending to IPv4 (an IPv4-mapped address)
    public async Task The_largest_segmented_send_arrives_whole_and_one_byte_more_is_refused(string family, int largest)
    {
        IPAddress loopback = family == "ipv6" ? IPAddress.IPv6Loopback : IPAddress.Loopback;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        using var peer = new Socket(loopback.AddressFamily, SocketType.Dgram, ProtocolType.Udp);
        peer.Bind(new IPEndPoint(loopback, 0));
        peer.ReceiveBufferSize = 1024 * 1024; // 64 datagrams at once
        // Each caller waits for its SENDMSG, so the kernel's refusal is this send's own error.
        await using IoUringUdpSocket sender = network.BindUdp(
            new IPEndPoint(family == "dual" ? IPAddress.IPv6Any : loopback, 0), new IoUringUdpOptions { MaxPendingSends = 0 });
        var peerEndPoint = (IPEndPoint)peer.LocalEndPoint!;
        SocketAddress to = family == "dual"
            ? new IPEndPoint(loopback.MapToIPv6(), peerEndPoint.Port).Serialize()
            : peerEndPoint.Serialize();
        const int SegmentSize = 1024; // 64 segments, the most one send makes, the last one shorter

        byte[] tooLong = RandomNumberGenerator.GetBytes(largest + 1);
        SocketException refused = await Assert.ThrowsAsync<SocketException>(
            () => sender.SendSegmentsToAsync(tooLong, SegmentSize, to).AsTask());
        Assert.Equal(SocketError.MessageSize, refused.SocketErrorCode);
        Assert.Equal(0, sender.DatagramsSent);

        byte[] payload = RandomNumberGenerator.GetBytes(largest);
        Assert.Equal(largest, await sender.SendSegmentsToAsync(payload, SegmentSize, to));
        // Nothing of the refused send arrived before these: the peer gets exactly the largest send's datagrams.
        await SegmentOffloadTests.AssertReceivedAsync(peer, payload, SegmentSize);
        Assert.Equal(64, sender.DatagramsSent);
        Assert.Equal(1, sender.SegmentOffloads);
    }

    [Fact]
    public async Task Over_a_1500_byte_MTU_larger_segments_go_one_by_one_and_smaller_ones_are_offloaded()
    {
        using var veth = new VethNamespaces(mtu: 1500);
        var sendmsgs = new FaultInjector([IORING_OP_SENDMSG], [Errno.EBADR], probability: 0, seed: 1); // counts only
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1, Loop = { Hooks = new() { Faults = sendmsgs } },
        });
        await using IoUringUdpSocket sender = VethNamespaces.Run(veth.A,
            () => network.BindUdp(new IPEndPoint(VethNamespaces.AddressA, 0), new IoUringUdpOptions { MaxPendingSends = 0 }));
        using Socket peer = VethNamespaces.Run(veth.B, () =>
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
            socket.Bind(new IPEndPoint(VethNamespaces.AddressB, 0));
            return socket;
        });
        SocketAddress to = peer.LocalEndPoint!.Serialize();

        // 2,000-byte segments exceed the MTU: the kernel refuses UDP_SEGMENT (EMSGSIZE) and each datagram goes alone,
        // cut into IP fragments the peer reassembles.
        byte[] large = RandomNumberGenerator.GetBytes(2000 * 5 + 700);
        Assert.Equal(large.Length, await sender.SendSegmentsToAsync(large, 2000, to));
        await SegmentOffloadTests.AssertReceivedAsync(peer, large, 2000);
        Assert.Equal(0, sender.SegmentOffloads);
        Assert.Equal(1 + 6, sendmsgs.Observed(IORING_OP_SENDMSG)); // the refused one, then one per datagram

        // The refusal is remembered for that size: the next such send goes one by one at once.
        Assert.Equal(large.Length, await sender.SendSegmentsToAsync(large, 2000, to));
        await SegmentOffloadTests.AssertReceivedAsync(peer, large, 2000);
        Assert.Equal(7 + 6, sendmsgs.Observed(IORING_OP_SENDMSG));

        // 1,400-byte segments fit: one SENDMSG, segmented by the kernel.
        byte[] small = RandomNumberGenerator.GetBytes(1400 * 30 + 1);
        Assert.Equal(small.Length, await sender.SendSegmentsToAsync(small, 1400, to));
        await SegmentOffloadTests.AssertReceivedAsync(peer, small, 1400);
        Assert.Equal(1, sender.SegmentOffloads);
        Assert.Equal(13 + 1, sendmsgs.Observed(IORING_OP_SENDMSG));
        Assert.Equal(6 + 6 + 31, sender.DatagramsSent);
    }
}
