using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>
/// Segmented sends from a buffer handed over to the socket (<c>SendSegmentsToAsync(IMemoryOwner, ...)</c>): no copy is
/// made (the socket's copies never grow), the kernel reads the caller's memory, and the socket disposes each buffer
/// exactly once, after the kernel is done with it (a buffer that poisons itself on dispose would otherwise put poison
/// on the wire), also when the send is refused, goes one datagram at a time, or the socket closes under it.
/// </summary>
public sealed class HandedOverBufferTests : NetworkTests
{
    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Handed_over_buffers_reach_the_peer_uncopied_and_are_disposed_once_the_kernel_read_them(
        bool refused)
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        if (refused)
        {
            SegmentOffloadTests.RefuseSegmenting(sender); // one datagram per SENDMSG, from the same memory
        }
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        var owners = new List<PoisoningOwner>();
        for (int i = 0; i < 30; i++)
        {
            var owner = new PoisoningOwner(1200 * 20);
            RandomNumberGenerator.Fill(owner.Memory.Span);
            byte[] expected = owner.Memory[..(1200 * 19 + 7)].ToArray();
            owners.Add(owner);
            Assert.Equal(expected.Length, await sender.SendSegmentsToAsync(owner, expected.Length, 1200, to));
            await SegmentOffloadTests.AssertReceivedAsync(peer, expected, 1200); // poison had it been disposed early
        }

        await Eventually.WaitForAsync(() => owners.All(owner => owner.Disposals == 1));
        Assert.Equal(0, sender.Sender.CopyBytes); // no send copied
        Assert.Equal(refused ? 0 : 30, sender.SegmentOffloads);
        await Task.Delay(100);
        Assert.All(owners, owner => Assert.Equal(1, owner.Disposals)); // once, not again later
    }

    [Fact]
    public async Task Blocks_of_the_loop_s_large_pool_go_back_to_it_once_sent()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        for (int i = 0; i < 20; i++)
        {
            IMemoryOwner<byte> block = sender.Loop.LargeMemoryPool.Rent(1200 * 54);
            byte[] expected = RandomNumberGenerator.GetBytes(1200 * 54);
            expected.CopyTo(block.Memory);
            await sender.SendSegmentsToAsync(block, expected.Length, 1200, to);
            await SegmentOffloadTests.AssertReceivedAsync(peer, expected, 1200);
        }
        await Eventually.WaitForAsync(() => sender.Loop.LargeBlockPool.RentedBlocks == 0);
        Assert.Equal(0, sender.Sender.CopyBytes);
    }

    [Fact]
    public async Task A_refused_send_still_disposes_the_buffer_it_was_handed()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();

        var tooLong = new PoisoningOwner(100);
        Assert.Throws<ArgumentOutOfRangeException>(() => sender.SendSegmentsToAsync(tooLong, 101, 10, to));
        var tooMany = new PoisoningOwner(65 * 10);
        Assert.Throws<ArgumentOutOfRangeException>(() => sender.SendSegmentsToAsync(tooMany, 650, 10, to));
        var noAddress = new PoisoningOwner(100);
        Assert.Throws<ArgumentNullException>(() => sender.SendSegmentsToAsync(noAddress, 100, 10, null!));
        var cancelled = new PoisoningOwner(100);
        await Assert.ThrowsAnyAsync<OperationCanceledException>(
            () => sender.SendSegmentsToAsync(cancelled, 100, 10, to, new CancellationToken(true)).AsTask());
        await sender.DisposeAsync();
        var closed = new PoisoningOwner(100);
        await Assert.ThrowsAsync<ObjectDisposedException>(
            () => sender.SendSegmentsToAsync(closed, 100, 10, to).AsTask());

        Assert.All(new[] { tooLong, tooMany, noAddress, cancelled, closed }, owner => Assert.Equal(1, owner.Disposals));
    }

    [Fact]
    public async Task A_close_with_handed_over_sends_queued_disposes_every_buffer_once()
    {
        IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        var owners = Enumerable.Range(0, 50).Select(_ => new PoisoningOwner(1200 * 50)).ToArray();
        // From another thread, so the sends queue for the loop while the close is posted behind them.
        await Task.Run(async () =>
        {
            foreach (PoisoningOwner owner in owners)
            {
                await sender.SendSegmentsToAsync(owner, owner.Memory.Length, 1200, to);
            }
            await sender.DisposeAsync();
        }).WaitAsync(Timeout);

        await sender.Closed.WaitAsync(Timeout);
        Assert.All(owners, owner => Assert.Equal(1, owner.Disposals));
    }

    private static Socket Peer()
    {
        var peer = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        peer.ReceiveBufferSize = 4 << 20; // a whole send's datagrams wait for the test's reads
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        return peer;
    }
}
