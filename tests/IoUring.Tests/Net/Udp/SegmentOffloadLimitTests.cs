using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;

namespace IoUring.Tests.Net;

/// <summary>
/// Segmented sends at the kernel's limits: the most one send carries over IPv4 (65,507 bytes) and IPv6 (65,527)
/// arriving datagram by datagram, one byte more refused with nothing sent.
/// </summary>
public sealed class SegmentOffloadLimitTests
{
    [Theory]
    [InlineData("ipv4", 65_507)]
    [InlineData("ipv6", 65_527)]
    public async Task The_largest_segmented_send_arrives_whole_and_one_byte_more_is_refused(string family, int largest)
    {
        IPAddress loopback = family == "ipv4" ? IPAddress.Loopback : IPAddress.IPv6Loopback;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        using var peer = new Socket(loopback.AddressFamily, SocketType.Dgram, ProtocolType.Udp);
        peer.Bind(new IPEndPoint(loopback, 0));
        peer.ReceiveBufferSize = 1024 * 1024; // 64 datagrams at once
        // Each caller waits for its SENDMSG, so the kernel's refusal is this send's own error.
        await using IoUringUdpSocket sender = network.BindUdp(new IPEndPoint(loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 });
        SocketAddress to = peer.LocalEndPoint!.Serialize();
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
}
