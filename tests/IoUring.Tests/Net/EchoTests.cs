using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;

namespace IoUring.Tests.Net;

public sealed class EchoTests
{
    internal static async Task EchoServerAsync(IoUringListener listener)
    {
        while (await listener.AcceptAsync() is { } connection)
        {
            _ = Task.Run(async () =>
            {
                await using (connection)
                {
                    await connection.Input.CopyToAsync(connection.Output);
                    await connection.Output.CompleteAsync();
                    await connection.Input.CompleteAsync();
                }
            });
        }
    }

    [Fact]
    public async Task Echo_over_ipv4_with_a_system_net_sockets_client()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        Task server = EchoServerAsync(listener);
        var endPoint = (IPEndPoint)listener.LocalEndPoint;
        Assert.NotEqual(0, endPoint.Port);

        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(endPoint);
        byte[] payload = RandomNumberGenerator.GetBytes(3 * 1024 * 1024 + 17);
        Task send = Task.Run(async () => { await client.SendAsync(payload); client.Shutdown(SocketShutdown.Send); });
        using var received = new MemoryStream();
        byte[] buffer = new byte[65536];
        int n;
        while ((n = await client.ReceiveAsync(buffer)) > 0)
        {
            received.Write(buffer, 0, n);
        }
        await send;
        Assert.Equal(SHA256.HashData(payload), SHA256.HashData(received.ToArray()));
    }
}
