using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using IoUring.Net;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>
/// Local addresses (<see cref="IoUringUdpOptions.ReceiveLocalAddress"/>: IP_PKTINFO, IPV6_RECVPKTINFO) on one socket
/// bound to a wildcard address of a host with two: loopback holds all of 127.0.0.0/8, so 127.0.0.1 and 127.0.0.2 are two
/// local addresses, and routing answers a peer at 127.0.0.1 from 127.0.0.1 whatever address it wrote to. Each datagram
/// reports the address it was sent to (single receives, the queue, batches, coalesced bursts, a dual-mode socket's IPv4
/// ones IPv4-mapped), and answers leave from the address asked for (single and segmented sends, and the one-by-one
/// fallback), checked by System.Net.Sockets peers. IPv6 (loopback has one address) runs over a veth pair between two
/// namespaces the test makes: two global addresses and a link-local one, whose scope id is the interface.
/// </summary>
public sealed partial class LocalAddressTests : NetworkTests
{
    internal static readonly IPAddress Second = IPAddress.Parse("127.0.0.2");
    private static readonly int LoopbackIndex = int.Parse(File.ReadAllText("/sys/class/net/lo/ifindex").Trim());

    [Fact]
    public async Task A_wildcard_socket_tells_its_two_addresses_apart_and_answers_from_each()
    {
        await using IoUringUdpSocket server = BindWildcard(Network, AddressFamily.InterNetwork);
        using Socket peer = BoundPeer(IPAddress.Loopback);
        foreach (IPAddress target in new[] { IPAddress.Loopback, Second, Second, IPAddress.Loopback })
        {
            await AskAndAnswerFromTheAddressAskedAsync(server, peer, target, expectedLocal: target);
        }
    }

    [Fact]
    public async Task Without_a_local_address_the_answer_leaves_from_the_address_routing_chooses()
    {
        // The control for the test above: were the local address ignored, its answers would all come from 127.0.0.1.
        await using IoUringUdpSocket server = BindWildcard(Network, AddressFamily.InterNetwork);
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = BoundPeer(IPAddress.Loopback);
        byte[] question = RandomNumberGenerator.GetBytes(10);
        await peer.SendToAsync(question, new IPEndPoint(Second, port));
        var from = new SocketAddress(AddressFamily.InterNetwork);
        await server.ReceiveFromAsync(new byte[64], from).AsTask().WaitAsync(Timeout);

        await server.SendToAsync(question, from);
        Assert.Equal(new IPEndPoint(IPAddress.Loopback, port), await ReceiveSourceAsync(peer, question));
    }

    [Fact]
    public async Task A_dual_mode_socket_reports_IPv4_addresses_mapped_and_answers_from_them()
    {
        await using IoUringUdpSocket server = BindWildcard(Network, AddressFamily.InterNetworkV6);
        using Socket peer4 = BoundPeer(IPAddress.Loopback);
        using Socket peer6 = BoundPeer(IPAddress.IPv6Loopback);
        foreach ((Socket peer, IPAddress target) in new[]
            { (peer4, Second), (peer6, IPAddress.IPv6Loopback), (peer4, IPAddress.Loopback) })
        {
            IPAddress expected = target.AddressFamily == AddressFamily.InterNetwork ? target.MapToIPv6() : target;
            await AskAndAnswerFromTheAddressAskedAsync(server, peer, target, expected);
        }
    }

    [Fact]
    public async Task An_IPv6_wildcard_socket_tells_its_addresses_apart_link_local_included_and_answers_from_each()
    {
        // Over a veth pair between two namespaces of the test's own: the server's side has two global addresses and a
        // link-local one (its scope id names the interface, which the answer must leave by). nodad: usable at once.
        using var veth = new VethNamespaces(mtu: 1500);
        string[] serverAddresses = ["fd78::1", "fd78::11", "fe80::78:1"];
        foreach (string address in serverAddresses)
        {
            VethNamespaces.Ip($"-n {veth.A} addr add {address}/64 dev veth0 nodad");
        }
        VethNamespaces.Ip($"-n {veth.B} addr add fd78::2/64 dev veth1 nodad");
        VethNamespaces.Ip($"-n {veth.B} addr add fe80::78:2/64 dev veth1 nodad");
        int serverInterface = VethNamespaces.Run(veth.A, () => (int)if_nametoindex("veth0"));
        int peerInterface = VethNamespaces.Run(veth.B, () => (int)if_nametoindex("veth1"));
        await using IoUringUdpSocket server = VethNamespaces.Run(veth.A,
            () => BindWildcard(Network, AddressFamily.InterNetworkV6));
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = VethNamespaces.Run(veth.B, () => BoundPeer(IPAddress.IPv6Any));
        var buffer = new byte[2048];
        var from = new SocketAddress(AddressFamily.InterNetworkV6);
        var local = new SocketAddress(AddressFamily.InterNetworkV6);

        foreach (string address in serverAddresses.Concat(serverAddresses))
        {
            IPAddress target = IPAddress.Parse(address);
            bool linkLocal = target.IsIPv6LinkLocal;
            byte[] question = RandomNumberGenerator.GetBytes(100);
            await peer.SendToAsync(question,
                new IPEndPoint(linkLocal ? new IPAddress(target.GetAddressBytes(), peerInterface) : target, port));
            DatagramResult received = await server.ReceiveMessageFromAsync(buffer, from, local)
                .AsTask().WaitAsync(Timeout);
            Assert.Equal(question, buffer[..received.BytesReceived]);
            Assert.Equal(serverInterface, received.InterfaceIndex);
            var expected = new IPEndPoint(linkLocal ? new IPAddress(target.GetAddressBytes(), serverInterface) : target,
                port);
            Assert.Equal(expected, Endpoint(local));
            Assert.Equal(linkLocal ? serverInterface : 0, ((IPEndPoint)Endpoint(local)).Address.ScopeId);

            await server.SendToAsync(question, from, local);
            var answeredFrom = (IPEndPoint)await ReceiveSourceAsync(peer, question);
            Assert.Equal(target, new IPAddress(answeredFrom.Address.GetAddressBytes()));
            Assert.Equal(port, answeredFrom.Port);
        }
    }

    [LibraryImport("libc", StringMarshalling = StringMarshalling.Utf8)]
    private static partial uint if_nametoindex(string name);

    [Fact]
    public async Task Queued_datagrams_and_batches_keep_each_datagram_s_local_address()
    {
        await using IoUringUdpSocket server = BindWildcard(Network, AddressFamily.InterNetwork);
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = BoundPeer(IPAddress.Loopback);
        // Sent before any receive waits: they go through the socket's queue.
        var targets = Enumerable.Range(0, 40).Select(i => i % 3 == 0 ? Second : IPAddress.Loopback).ToArray();
        for (int i = 0; i < targets.Length; i++)
        {
            await peer.SendToAsync(new[] { (byte)i }, new IPEndPoint(targets[i], port));
        }
        await Eventually.WaitForAsync(() => server.DatagramsReceived == targets.Length);

        var local = new SocketAddress(AddressFamily.InterNetwork);
        var from = new SocketAddress(AddressFamily.InterNetwork);
        var buffer = new byte[16];
        for (int i = 0; i < 10; i++)
        {
            await server.ReceiveMessageFromAsync(buffer, from, local).AsTask().WaitAsync(Timeout);
            Assert.Equal(i, buffer[0]);
            Assert.Equal(new IPEndPoint(targets[i], port), Endpoint(local));
        }
        var batch = new UdpDatagramBatch(8, 16);
        for (int i = 10; i < targets.Length;)
        {
            int count = await server.ReceiveBatchAsync(batch).AsTask().WaitAsync(Timeout);
            for (int slot = 0; slot < count; slot++, i++)
            {
                Assert.Equal(i, batch.GetPayload(slot).Span[0]);
                Assert.Equal(new IPEndPoint(targets[i], port), Endpoint(batch.GetLocalAddress(slot)));
                Assert.Equal(LoopbackIndex, batch.GetResult(slot).InterfaceIndex);
            }
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Segmented_sends_leave_from_the_local_address_asked_for_offloaded_or_one_by_one(bool refused)
    {
        await using IoUringUdpSocket server = BindWildcard(Network, AddressFamily.InterNetwork);
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        if (refused)
        {
            SegmentOffloadTests.RefuseSegmenting(server); // so the datagrams go one per SENDMSG
        }
        using Socket peer = BoundPeer(IPAddress.Loopback);
        SocketAddress local = new IPEndPoint(Second, port).Serialize();
        byte[] burst = RandomNumberGenerator.GetBytes(1200 * 20 - 500);

        await server.SendSegmentsToAsync(burst, 1200, peer.LocalEndPoint!.Serialize(), local);

        var buffer = new byte[2048];
        for (int offset = 0; offset < burst.Length; offset += 1200)
        {
            SocketReceiveFromResult received = await peer.ReceiveFromAsync(buffer, new IPEndPoint(IPAddress.Any, 0))
                .WaitAsync(Timeout);
            Assert.Equal(burst[offset..Math.Min(offset + 1200, burst.Length)], buffer[..received.ReceivedBytes]);
            Assert.Equal(new IPEndPoint(Second, port), received.RemoteEndPoint);
        }
        await Eventually.WaitForAsync(() => server.DatagramsSent == 20);
        Assert.Equal(refused ? 0 : 1, server.SegmentOffloads);
    }

    [Fact]
    public async Task A_coalesced_burst_reports_its_local_address_on_every_datagram()
    {
        await using IoUringUdpSocket server = Network.BindUdp(new IPEndPoint(IPAddress.Any, 0),
            new IoUringUdpOptions { ReceiveLocalAddress = true, ReceiveCoalesced = true });
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        byte[] burst = RandomNumberGenerator.GetBytes(1000 * 30);
        await sender.SendSegmentsToAsync(burst, 1000, new IPEndPoint(Second, port).Serialize());

        var buffer = new byte[2048];
        var from = new SocketAddress(AddressFamily.InterNetwork);
        var local = new SocketAddress(AddressFamily.InterNetwork);
        for (int offset = 0; offset < burst.Length; offset += 1000)
        {
            DatagramResult received = await server.ReceiveMessageFromAsync(buffer, from, local)
                .AsTask().WaitAsync(Timeout);
            Assert.Equal(burst[offset..(offset + 1000)], buffer[..received.BytesReceived]);
            Assert.Equal(new IPEndPoint(Second, port), Endpoint(local));
        }
        Assert.True(server.CoalescedReceives > 0, "the kernel coalesced nothing: the two control messages were not read together");
    }

    [Fact]
    public async Task Misuse_is_refused_with_an_error_naming_it()
    {
        await using IoUringUdpSocket plain = Network.BindUdp(new IPEndPoint(IPAddress.Any, 0));
        var address = new SocketAddress(AddressFamily.InterNetwork);
        var error = Assert.Throws<InvalidOperationException>(
            () => plain.ReceiveMessageFromAsync(new byte[16], address, new SocketAddress(AddressFamily.InterNetwork)));
        Assert.Contains(nameof(IoUringUdpOptions.ReceiveLocalAddress), error.Message);

        // A batch filled by a socket without the option has no local addresses to give.
        using Socket peer = BoundPeer(IPAddress.Loopback);
        await peer.SendToAsync(new byte[3], new IPEndPoint(IPAddress.Loopback, ((IPEndPoint)plain.LocalEndPoint).Port));
        var batch = new UdpDatagramBatch(4, 16);
        Assert.Equal(1, await plain.ReceiveBatchAsync(batch).AsTask().WaitAsync(Timeout));
        error = Assert.Throws<InvalidOperationException>(() => batch.GetLocalAddress(0));
        Assert.Contains(nameof(IoUringUdpOptions.ReceiveLocalAddress), error.Message);

        // A source of the other family.
        SocketAddress ipv6 = new IPEndPoint(IPAddress.IPv6Loopback, 0).Serialize();
        var wrongFamily = Assert.Throws<ArgumentException>(() => plain.SendToAsync(new byte[1], address, ipv6));
        Assert.Equal("localAddress", wrongFamily.ParamName);
    }

    [Fact]
    public async Task A_source_address_the_host_does_not_have_fails_the_send_and_the_socket_goes_on()
    {
        // MaxPendingSends 0: every send waits for the kernel's answer, so this one's error is its own.
        await using IoUringUdpSocket server = Network.BindUdp(new IPEndPoint(IPAddress.Any, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 });
        using Socket peer = BoundPeer(IPAddress.Loopback);
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        SocketAddress notOurs = new IPEndPoint(IPAddress.Parse("192.0.2.7"), 0).Serialize(); // TEST-NET-1

        var error = await Assert.ThrowsAsync<SocketException>(() => server.SendToAsync(new byte[5], to, notOurs).AsTask());
        Assert.Equal(SocketError.NetworkUnreachable, error.SocketErrorCode); // routing's ENETUNREACH for that source

        byte[] after = RandomNumberGenerator.GetBytes(5);
        await server.SendToAsync(after, to, new IPEndPoint(IPAddress.Any, 0).Serialize()); // unspecified: routing chooses
        Assert.Equal(new IPEndPoint(IPAddress.Loopback, ((IPEndPoint)server.LocalEndPoint).Port),
            await ReceiveSourceAsync(peer, after));

        // IPv6: ip6_datagram_send_ctl refuses a source the host does not have itself (EINVAL).
        await using IoUringUdpSocket server6 = Network.BindUdp(new IPEndPoint(IPAddress.IPv6Any, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 });
        using Socket peer6 = BoundPeer(IPAddress.IPv6Loopback);
        SocketAddress notOurs6 = new IPEndPoint(IPAddress.Parse("2001:db8::7"), 0).Serialize(); // documentation prefix
        error = await Assert.ThrowsAsync<SocketException>(
            () => server6.SendToAsync(new byte[5], peer6.LocalEndPoint!.Serialize(), notOurs6).AsTask());
        Assert.Equal(SocketError.InvalidArgument, error.SocketErrorCode);
    }

    [Fact]
    public async Task Reporting_local_addresses_keeps_the_largest_datagram_received_whole()
    {
        // Without coalesced receives each buffer holds one datagram of MaxDatagramSize: a longer one is cut, with or
        // without local addresses (their control room is not a coalesced burst's 64 KiB).
        await using IoUringUdpSocket server = Network.BindUdp(new IPEndPoint(IPAddress.Any, 0),
            new IoUringUdpOptions { ReceiveLocalAddress = true, MaxDatagramSize = 100 });
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = BoundPeer(IPAddress.Loopback);
        byte[] datagram = RandomNumberGenerator.GetBytes(300);
        await peer.SendToAsync(datagram, new IPEndPoint(Second, port));

        var buffer = new byte[1000];
        var from = new SocketAddress(AddressFamily.InterNetwork);
        var local = new SocketAddress(AddressFamily.InterNetwork);
        DatagramResult received = await server.ReceiveMessageFromAsync(buffer, from, local).AsTask().WaitAsync(Timeout);
        Assert.Equal(new DatagramResult(100, 300) { InterfaceIndex = LoopbackIndex }, received);
        Assert.Equal(datagram[..100], buffer[..100]);
        Assert.Equal(new IPEndPoint(Second, port), Endpoint(local));
    }

    [Fact]
    public async Task A_dual_mode_socket_answers_an_IPv4_peer_from_the_unspecified_address()
    {
        // "::" lets routing choose, as 0.0.0.0 does on an IPv4 socket, also towards an IPv4 (mapped) peer.
        await using IoUringUdpSocket server = Network.BindUdp(new IPEndPoint(IPAddress.IPv6Any, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 });
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = BoundPeer(IPAddress.Loopback);
        var peerEndPoint = (IPEndPoint)peer.LocalEndPoint!;
        SocketAddress to = new IPEndPoint(peerEndPoint.Address.MapToIPv6(), peerEndPoint.Port).Serialize();
        byte[] answer = RandomNumberGenerator.GetBytes(5);

        await server.SendToAsync(answer, to, new IPEndPoint(IPAddress.IPv6Any, 0).Serialize()).AsTask()
            .WaitAsync(Timeout);
        Assert.Equal(new IPEndPoint(IPAddress.Loopback, port), await ReceiveSourceAsync(peer, answer));
    }

    [Fact]
    public async Task Options_changed_after_the_bind_do_not_change_the_socket()
    {
        // One options object for several sockets: each socket keeps what it was bound with.
        var options = new IoUringUdpOptions { ReceiveLocalAddress = true };
        await using IoUringUdpSocket server = Network.BindUdp(new IPEndPoint(IPAddress.Any, 0), options);
        options.ReceiveLocalAddress = false;
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = BoundPeer(IPAddress.Loopback);
        await peer.SendToAsync(new byte[3], new IPEndPoint(Second, port));

        var batch = new UdpDatagramBatch(4, 16);
        Assert.Equal(1, await server.ReceiveBatchAsync(batch).AsTask().WaitAsync(Timeout));
        Assert.Equal(new IPEndPoint(Second, port), Endpoint(batch.GetLocalAddress(0)));
    }

    [Fact]
    public async Task A_source_address_the_host_does_not_have_fails_the_next_send_not_the_receives()
    {
        // Sends nobody awaits (the default): the refusal (routing's ENETUNREACH for that source) is the send's own, for
        // the next send, as any other refused send's; a server's receive loop goes on.
        await using IoUringUdpSocket server = BindWildcard(Network, AddressFamily.InterNetwork);
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        using Socket peer = BoundPeer(IPAddress.Loopback);
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        SocketAddress notOurs = new IPEndPoint(IPAddress.Parse("192.0.2.7"), 0).Serialize(); // TEST-NET-1
        await server.SendToAsync(new byte[5], to, notOurs);
        await Eventually.WaitForAsync(() => server.Sender.Pending == 0); // its completion was handled

        byte[] question = RandomNumberGenerator.GetBytes(7);
        await peer.SendToAsync(question, new IPEndPoint(Second, port));
        var buffer = new byte[64];
        var from = new SocketAddress(AddressFamily.InterNetwork);
        var local = new SocketAddress(AddressFamily.InterNetwork);
        DatagramResult received = await server.ReceiveMessageFromAsync(buffer, from, local).AsTask()
            .WaitAsync(Timeout);
        Assert.Equal(question, buffer[..received.BytesReceived]);
        var error = await Assert.ThrowsAsync<SocketException>(() => server.SendToAsync(question, from, local).AsTask());
        Assert.Equal(SocketError.NetworkUnreachable, error.SocketErrorCode);
        await server.SendToAsync(question, from, local);
        Assert.Equal(new IPEndPoint(Second, port), await ReceiveSourceAsync(peer, question));
    }

    internal static IoUringUdpSocket BindWildcard(IoUringNetwork network, AddressFamily family)
        => network.BindUdp(
            new IPEndPoint(family == AddressFamily.InterNetwork ? IPAddress.Any : IPAddress.IPv6Any, 0),
            new IoUringUdpOptions { ReceiveLocalAddress = true });

    /// <summary>The peer writes to <paramref name="target"/>; the server sees the datagram, its source and
    /// <paramref name="expectedLocal"/> on loopback, answers from that local address, and the answer comes from
    /// <paramref name="target"/>.</summary>
    private static async Task AskAndAnswerFromTheAddressAskedAsync(IoUringUdpSocket server, Socket peer,
        IPAddress target, IPAddress expectedLocal)
    {
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        var buffer = new byte[2048];
        var from = new SocketAddress(server.LocalEndPoint.AddressFamily);
        var local = new SocketAddress(server.LocalEndPoint.AddressFamily);
        byte[] question = RandomNumberGenerator.GetBytes(100);
        await peer.SendToAsync(question, new IPEndPoint(target, port));
        DatagramResult received = await server.ReceiveMessageFromAsync(buffer, from, local)
            .AsTask().WaitAsync(Timeout);
        Assert.Equal(question, buffer[..received.BytesReceived]);
        Assert.Equal(new IPEndPoint(expectedLocal, port), Endpoint(local));
        Assert.Equal(LoopbackIndex, received.InterfaceIndex);

        await server.SendToAsync(question, from, local);
        Assert.Equal(new IPEndPoint(target, port), await ReceiveSourceAsync(peer, question));
    }

    private static Socket BoundPeer(IPAddress address)
    {
        var socket = new Socket(address.AddressFamily, SocketType.Dgram, ProtocolType.Udp);
        socket.Bind(new IPEndPoint(address, 0));
        return socket;
    }

    /// <summary>Receives the answer to <paramref name="expected"/> and returns where it came from.</summary>
    private static async Task<EndPoint> ReceiveSourceAsync(Socket peer, byte[] expected)
    {
        var buffer = new byte[4096];
        EndPoint any = peer.AddressFamily == AddressFamily.InterNetwork
            ? new IPEndPoint(IPAddress.Any, 0)
            : new IPEndPoint(IPAddress.IPv6Any, 0);
        SocketReceiveFromResult received = await peer.ReceiveFromAsync(buffer, any).WaitAsync(Timeout);
        Assert.Equal(expected, buffer[..received.ReceivedBytes]);
        return received.RemoteEndPoint;
    }

    internal static EndPoint Endpoint(SocketAddress address) => new IPEndPoint(IPAddress.Any, 0).Create(address);
}

/// <summary>Allocation per datagram of answers from a local address: alone, as the other tests would allocate in the
/// same window.</summary>
[Collection(FdCountingCollection.Name)]
public sealed class LocalAddressAllocationTests
{
    [Fact]
    public async Task Steady_state_answers_from_a_local_address_allocate_nothing_per_datagram()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        await using IoUringUdpSocket server = LocalAddressTests.BindWildcard(network, AddressFamily.InterNetwork);
        int port = ((IPEndPoint)server.LocalEndPoint).Port;
        await using IoUringUdpSocket client = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = new IPEndPoint(LocalAddressTests.Second, port).Serialize();
        var payload = new byte[256];
        var reply = new byte[2048];
        var clientFrom = new SocketAddress(AddressFamily.InterNetwork);

        async Task ServeAsync()
        {
            var buffer = new byte[2048];
            var from = new SocketAddress(AddressFamily.InterNetwork);
            var local = new SocketAddress(AddressFamily.InterNetwork);
            while (true)
            {
                DatagramResult received = await server.ReceiveMessageFromAsync(buffer, from, local);
                await server.SendToAsync(buffer.AsMemory(0, received.BytesReceived), from, local);
            }
        }

        async Task RoundTripsAsync(int count)
        {
            for (int i = 0; i < count; i++)
            {
                await client.SendToAsync(payload, to);
                await client.ReceiveFromAsync(reply, clientFrom);
            }
        }

        Task serving = Task.Run(ServeAsync); // off xunit's synchronization context, which allocates per continuation
        long perRoundTrip = await Allocations.PerOperationAsync(RoundTripsAsync, warmUp: 3000, measured: 5000);
        Assert.Equal(new IPEndPoint(LocalAddressTests.Second, port), LocalAddressTests.Endpoint(clientFrom));
        // As UdpLifetimeTests' echo: under 64 bytes per round trip is the thread pool's queue segments, not one object
        // per operation.
        Assert.True(perRoundTrip < 64, $"{perRoundTrip} bytes allocated per round trip");
        await server.DisposeAsync();
        await Assert.ThrowsAnyAsync<Exception>(() => serving.WaitAsync(TimeSpan.FromSeconds(10)));
    }
}
