using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Net;

public sealed class ZeroCopyTests
{
    private static async Task<(IoUringConnection Server, byte[] Received, byte[] Payload)> DownloadAsync(IoUringNetwork network, int size)
    {
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync())!;
        byte[] payload = RandomNumberGenerator.GetBytes(size);
        return (server, await TransferAsync(server, client, payload, chunk: 200_000), payload);
    }

    /// <summary>Writes <paramref name="payload"/> to <paramref name="server"/> in chunks, then closes it; returns what <paramref name="client"/> read until the FIN.</summary>
    internal static async Task<byte[]> TransferAsync(IoUringConnection server, Socket client, byte[] payload, int chunk)
    {
        Task send = Task.Run(async () =>
        {
            for (int offset = 0; offset < payload.Length; offset += chunk)
            {
                // Copied into the output's pool blocks (Write, then flush), the memory zero-copy sends take; a large
                // WriteAsync would be sent from the payload itself, which never goes zero-copy.
                server.Output.Write(payload.AsSpan(offset, Math.Min(chunk, payload.Length - offset)));
                await server.Output.FlushAsync();
            }
            await server.DisposeAsync();
        });
        using var received = new MemoryStream();
        await new NetworkStream(client).CopyToAsync(received);
        await send;
        return received.ToArray();
    }

    [Fact]
    public async Task Large_sends_start_zero_copy_and_return_to_plain_sends_when_the_kernel_copies_on_loopback()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = 16 * 1024 });
        int blocksBefore = network.RentedMemoryBlocks;
        var (server, received, payload) = await DownloadAsync(network, 4 * 1024 * 1024);
        EchoTests.AssertSameBytes(payload, received);
        Assert.True(server.ZeroCopySends >= 1, "no zero-copy send was made");
        if (IoUringCapabilities.Current.HasZeroCopyReportUsage)
        {
            // Loopback always copies: the notification says so, and the connection stops paying for zero-copy.
            Assert.True(server.ZeroCopyReverted);
            Assert.True(server.ZeroCopySends < 20, $"{server.ZeroCopySends} zero-copy sends after the kernel reported copying");
        }
        else
        {
            Assert.False(server.ZeroCopyReverted); // before 6.2 the kernel cannot say it copied
        }
        Assert.Equal(blocksBefore, network.RentedMemoryBlocks); // every block held for a notification came back
    }

    [Fact]
    public async Task Without_a_threshold_no_zero_copy_send_is_made()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = null });
        var (server, received, payload) = await DownloadAsync(network, 1024 * 1024);
        EchoTests.AssertSameBytes(payload, received);
        Assert.Equal(0, server.ZeroCopySends);
    }

    /// <summary>A server connection that sent 64 KiB zero-copy to a client that reads nothing (4 KiB receive buffer):
    /// most of it stays unacknowledged, so the kernel holds the memory and the notification waits for the peer.</summary>
    private static async Task<(Socket Client, IoUringConnection Server)> HeldNotificationAsync(IoUringListener listener)
    {
        var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { ReceiveBufferSize = 4096 };
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        server.Output.Write(RandomNumberGenerator.GetBytes(64 * 1024)); // into pool blocks, which go zero-copy
        _ = server.Output.FlushAsync(); // does not complete: the peer reads nothing
        // The send completes (the socket took all of it), only its notification stays outstanding.
        await Eventually.WaitForAsync(() => server.BytesSent == 64 * 1024);
        Assert.Equal(64 * 1024, server.BytesSent);
        Assert.Equal(1, server.ZeroCopySends);
        return (client, server);
    }

    [Fact]
    public async Task Closing_does_not_wait_for_zero_copy_notifications_and_the_memory_is_freed_when_the_peer_goes()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = 16 * 1024 });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        EventLoop loop = network.Loops[0];
        int owners = loop.LiveOwners;
        int blocks = network.RentedMemoryBlocks;

        var (gracefulClient, graceful) = await HeldNotificationAsync(listener);
        var (abortedClient, aborted) = await HeldNotificationAsync(listener);
        await graceful.Output.CompleteAsync();
        await graceful.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5)); // FIN queued behind the unsent data
        aborted.Abort();
        await aborted.Closed.WaitAsync(TimeSpan.FromSeconds(5));
        Assert.True(graceful.ConnectionClosed.WaitHandle.WaitOne(TimeSpan.FromSeconds(5)));
        Assert.True(aborted.ConnectionClosed.WaitHandle.WaitOne(TimeSpan.FromSeconds(5)));
        Assert.Equal(0, network.ConnectionCount);

        // The memory waits instead: the closed socket still holds the unacknowledged data until the peer goes.
        Assert.True(loop.LiveOwners > owners, "the gracefully closed connection's handle was freed before its notification");
        gracefulClient.Dispose(); // unread data: the client resets, the kernel drops what it held
        abortedClient.Dispose();
        await Eventually.WaitForAsync(() => loop.LiveOwners == owners && network.RentedMemoryBlocks == blocks);
        Assert.Equal(owners, loop.LiveOwners);
        Assert.Equal(blocks, network.RentedMemoryBlocks); // the pinned blocks came back with the notifications
    }

    [Fact]
    public async Task A_peer_that_stops_reading_holds_no_more_than_max_write_buffer_size_with_zero_copy_sends()
    {
        // Zero-copy sends complete once the socket took their bytes, but their blocks stay pinned until the peer
        // acknowledges them: for a peer that does not read, never. They count against MaxWriteBufferSize as unsent
        // bytes do, so a slow reader holds what it holds on copying sends (Kestrel's Sockets transport): the threshold
        // plus the write that crossed it.
        const int Chunk = 16 * 1024, Threshold = 64 * 1024;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            ZeroCopySendThreshold = Chunk,
            MaxWriteBufferSize = Threshold,
            Loop = { Hooks = new TestHooks { IgnoreZeroCopyCopied = true } }, // loopback copies: stay zero-copy as a NIC would
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { ReceiveBufferSize = 4096 };
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        PinnedBlockMemoryPool pool = (PinnedBlockMemoryPool)network.Loops[0].MemoryPool;
        int blocks = pool.RentedBlocks;
        pool.ResetPeak();

        // Writes until a flush stays waiting (the bound reached) or 16 MiB went, which no bound would allow.
        byte[] chunk = RandomNumberGenerator.GetBytes(Chunk);
        long written = 0;
        while (written < 16 * 1024 * 1024)
        {
            server.Output.Write(chunk);
            written += Chunk;
            Task flush = server.Output.FlushAsync().AsTask();
            if (await Task.WhenAny(flush, Task.Delay(TimeSpan.FromSeconds(2))) != flush)
            {
                break;
            }
        }
        Assert.True(server.ZeroCopySends >= 1, "no zero-copy send was made");
        int bound = (Threshold + Chunk) / pool.BlockBytes + 1; // one block partly written
        Assert.True(pool.PeakRentedBlocks - blocks <= bound,
            $"{pool.PeakRentedBlocks - blocks} blocks held for a peer that reads nothing (bound {bound}); {server.BytesSent} B sent, {server.ZeroCopySends} zero-copy");

        client.Dispose(); // unread data: a reset, the kernel lets go of what it held
        server.Abort();
        await Eventually.WaitForAsync(() => pool.RentedBlocks == blocks);
        Assert.Equal(blocks, pool.RentedBlocks);
    }

    [Fact]
    public async Task A_stopping_loop_does_not_wait_for_a_notification_the_peer_holds()
    {
        var reported = new List<Exception>();
        var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            ZeroCopySendThreshold = 16 * 1024,
            Loop = { UnhandledException = ex => { lock (reported) { reported.Add(ex); } } },
        });
        var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        int blocks = network.RentedMemoryBlocks;
        var (client, server) = await HeldNotificationAsync(listener);
        var (openClient, _) = await HeldNotificationAsync(listener);
        using (client)
        using (openClient)
        {
            await server.Output.CompleteAsync();
            await server.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
            Assert.Equal(2, network.Loops[0].NotificationsPending);
            int held = 4; // the closed connection's 64 KiB: four 16 KiB blocks pinned until its notification
            await listener.DisposeAsync();
            // Not the loop's 10 s shutdown deadline: the notification holds memory, not the fd or the ring's buffers.
            await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
            Assert.Empty(reported); // in particular no "stopped with requests still in flight"
            // The open connection was aborted by the stop (RST drops its data): its notification came and its blocks
            // went back. The closed one's stay pinned for good: the kernel may still send from them.
            Assert.Equal(blocks + held, network.RentedMemoryBlocks);
        }
    }

    [Fact]
    public async Task A_zero_copy_send_the_kernel_refuses_with_einval_is_sent_again_plainly_and_the_connection_stays()
    {
        // What a kernel without a flag or opcode we use answers (6.0/6.1 and REPORT_USAGE): EINVAL, nothing sent.
        var faults = new FaultInjector([IORING_OP_SEND_ZC, IORING_OP_SENDMSG_ZC], [Errno.EINVAL], probability: 1, seed: 1);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            ZeroCopySendThreshold = 16 * 1024,
            Loop = { Hooks = new() { Faults = faults } },
        });
        int blocksBefore = network.RentedMemoryBlocks;
        var (server, received, payload) = await DownloadAsync(network, 1024 * 1024);
        EchoTests.AssertSameBytes(payload, received); // every byte, then a clean FIN: no reset
        Assert.Equal(1, faults.Injected);
        Assert.Equal(1, server.ZeroCopySends); // the connection went back to plain sends at once
        Assert.True(server.ZeroCopyReverted);
        Assert.Equal(blocksBefore, network.RentedMemoryBlocks);
    }

    [Fact]
    public async Task Without_report_usage_zero_copy_sends_go_without_the_flag()
    {
        // As on 6.0/6.1: the flag is missing. The kernel then never says it copied, so on loopback the connection
        // keeps sending zero-copy (with the flag it would revert after the first notification).
        IoUringCapabilities caps = IoUringCapabilities.Current.WithZeroCopyForTesting(sendMsg: true, reportUsage: false);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = 16 * 1024, Loop = { Hooks = new() { Capabilities = caps } } });
        int blocksBefore = network.RentedMemoryBlocks;
        var (server, received, payload) = await DownloadAsync(network, 4 * 1024 * 1024);
        EchoTests.AssertSameBytes(payload, received);
        Assert.True(server.ZeroCopySends > 1, $"only {server.ZeroCopySends} zero-copy sends");
        Assert.False(server.ZeroCopyReverted); // with the flag, loopback's first notification says "copied" (test above)
        Assert.Equal(blocksBefore, network.RentedMemoryBlocks);
    }

    [Fact]
    public async Task Without_sendmsg_zc_gather_sends_are_never_zero_copy()
    {
        // As on 6.0: SEND_ZC but no SENDMSG_ZC. A SENDMSG_ZC would meet the injected EINVAL and revert the connection.
        IoUringCapabilities caps = IoUringCapabilities.Current.WithZeroCopyForTesting(sendMsg: false, reportUsage: false);
        var faults = new FaultInjector([IORING_OP_SENDMSG_ZC], [Errno.EINVAL], probability: 1, seed: 1);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = 16 * 1024, Loop = { Hooks = new() { Faults = faults, Capabilities = caps } } });
        var (server, received, payload) = await DownloadAsync(network, 1024 * 1024);
        EchoTests.AssertSameBytes(payload, received);
        Assert.Equal(0, faults.Injected);
        Assert.False(server.ZeroCopyReverted);
    }
}
