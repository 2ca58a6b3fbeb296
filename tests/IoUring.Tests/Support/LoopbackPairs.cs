using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Tests.Support;

/// <summary>A System.Net.Sockets client connected to an <see cref="IoUringListener"/>, with the server's side accepted.</summary>
internal static class LoopbackPairs
{
    public static async Task<(Socket Client, IoUringConnection Server)> ConnectAsync(IoUringListener listener)
    {
        var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        return (client, server);
    }

    /// <summary>Receives exactly <paramref name="length"/> bytes on the client (failing on an early end of stream).</summary>
    public static async Task<byte[]> ReceiveExactlyAsync(Socket client, int length)
    {
        var received = new byte[length];
        int total = 0;
        while (total < length)
        {
            int n = await client.ReceiveAsync(received.AsMemory(total)).AsTask().WaitAsync(TimeSpan.FromSeconds(20));
            Assert.NotEqual(0, n);
            total += n;
        }
        return received;
    }
}
