using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;

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
        Task send = Task.Run(async () =>
        {
            for (int offset = 0; offset < payload.Length; offset += 200_000)
            {
                await server.Output.WriteAsync(payload.AsMemory(offset, Math.Min(200_000, payload.Length - offset)));
            }
            await server.DisposeAsync();
        });
        using var received = new MemoryStream();
        await new NetworkStream(client).CopyToAsync(received);
        await send;
        return (server, received.ToArray(), payload);
    }

    [Fact]
    public async Task Large_sends_start_zero_copy_and_return_to_plain_sends_when_the_kernel_copies_on_loopback()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = 16 * 1024 });
        int blocksBefore = network.RentedMemoryBlocks;
        var (server, received, payload) = await DownloadAsync(network, 4 * 1024 * 1024);
        EchoTests.AssertSameBytes(payload, received);
        Assert.True(server.ZeroCopySends >= 1, "no zero-copy send was made");
        // Loopback always copies: the notification says so, and the connection stops paying for zero-copy.
        Assert.True(server.ZeroCopyReverted);
        Assert.True(server.ZeroCopySends < 20, $"{server.ZeroCopySends} zero-copy sends after the kernel reported copying");
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
}
