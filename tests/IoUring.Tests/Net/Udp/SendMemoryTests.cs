using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Tests.Net;

/// <summary>
/// What a socket's sends hold: each send is a native copy that completes at once while fewer than
/// <see cref="IoUringUdpOptions.MaxPendingSends"/> datagrams are in flight, so a sender faster than the kernel holds at
/// most that many datagrams' copies, segmented sends (64 KiB each) included.
/// </summary>
public sealed class SendMemoryTests
{
    [Fact]
    public async Task A_segmented_sender_faster_than_the_socket_holds_about_MaxPendingSends_datagrams_of_copies()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        var options = new IoUringUdpOptions { MaxPendingSends = 1024 };
        await using IoUringUdpSocket sender = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0), options);
        using var peer = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        const int SegmentSize = 1200, Segments = 54; // 64,800 bytes per send
        var burst = new byte[SegmentSize * Segments];

        // Off the loop and off xunit's context: each send copies and returns at once until the bound is reached.
        await Task.Run(async () =>
        {
            for (int i = 0; i < 2000; i++)
            {
                await sender.SendSegmentsToAsync(burst, SegmentSize, to);
            }
        }).WaitAsync(TimeSpan.FromSeconds(60));

        // 1,024 datagrams are 19 segmented sends of 54; each copy is one send's bytes. (Counting sends rather than
        // datagrams, 1,024 sends of 64 KiB each were held: 66 MB.)
        long bound = (options.MaxPendingSends / Segments + 2) * (long)burst.Length;
        Assert.True(sender.Sender.CopyBytes <= bound,
            $"{sender.Sender.CopyBytes:N0} bytes of send copies, more than {bound:N0}");
    }

    [Fact]
    public async Task Awaited_sends_one_after_another_reuse_one_operation()
    {
        // MaxPendingSends = 0: every send waits for the kernel. Its completion resumes the caller inline; the caller's
        // next send must find the operation back in the pool, not make a second copy beside it.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        var options = new IoUringUdpOptions { MaxPendingSends = 0 };
        await using IoUringUdpSocket sender = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0), options);
        using var peer = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        var datagram = new byte[1000];

        long oneCopy = 0;
        await Task.Run(async () =>
        {
            for (int i = 0; i < 200; i++)
            {
                await sender.SendToAsync(datagram, to);
                // A caller that saw the result before its completion finished on the other thread finds the operation
                // back a moment later; one resumed inside the completion (the old defect) never would.
                Assert.True(SpinWait.SpinUntil(() => sender.Sender.PooledOperations == 1, 5000),
                    $"send {i}: its operation did not go back to the pool");
                if (i == 0)
                {
                    oneCopy = sender.Sender.CopyBytes;
                }
            }
        }).WaitAsync(TimeSpan.FromSeconds(30));

        Assert.True(oneCopy > 0, "the first send made no copy");
        Assert.True(sender.Sender.CopyBytes == oneCopy,
            $"{sender.Sender.CopyBytes:N0} bytes of send copies after 200 awaited sends, one send's being {oneCopy:N0}");
    }
}
