using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Text;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>A TLS client over a raw socket the test controls (to reset it, half-close it, or stop mid-handshake).</summary>
public sealed class TlsClient : IDisposable
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);
    private static readonly Lazy<Task<byte[]>> s_clientHello = new(CaptureClientHelloAsync);

    private TlsClient(Socket socket, SslStream stream)
    {
        Socket = socket;
        Stream = stream;
    }

    public Socket Socket { get; }

    public SslStream Stream { get; }

    /// <summary>Connects and completes a handshake that offers <paramref name="protocols"/> by ALPN.</summary>
    public static async Task<TlsClient> ConnectAsync(TestServer server, params SslApplicationProtocol[] protocols)
    {
        Socket socket = await server.ConnectAsync();
        var stream = new SslStream(new NetworkStream(socket, ownsSocket: true));
        await stream.AuthenticateAsClientAsync(new SslClientAuthenticationOptions
        {
            TargetHost = "localhost",
            ApplicationProtocols = [.. protocols],
            RemoteCertificateValidationCallback = TestCertificate.Pinned,
        }).WaitAsync(s_hangGuard);
        return new TlsClient(socket, stream);
    }

    public Task SendAsync(string text) => Stream.WriteAsync(Encoding.ASCII.GetBytes(text)).AsTask().WaitAsync(s_hangGuard);

    /// <summary>Reads until <paramref name="done"/> holds for everything read so far (as Latin-1 text) or EOF; returns the text.</summary>
    public async Task<string> ReceiveUntilAsync(Func<string, bool> done)
    {
        var text = new StringBuilder();
        byte[] buffer = new byte[1 << 16];
        while (!done(text.ToString()))
        {
            int n = await Stream.ReadAsync(buffer).AsTask().WaitAsync(s_hangGuard);
            if (n == 0)
            {
                break;
            }
            text.Append(Encoding.Latin1.GetString(buffer, 0, n));
        }
        return text.ToString();
    }

    /// <summary>
    /// Reads until the server ends the connection: EOF (with or without close_notify) or a reset, which SslStream
    /// reports as an IOException. Returns the bytes read before the end.
    /// </summary>
    public async Task<long> ReadToEndAsync()
    {
        byte[] buffer = new byte[1 << 16];
        long total = 0;
        try
        {
            int n;
            while ((n = await Stream.ReadAsync(buffer).AsTask().WaitAsync(s_hangGuard)) > 0)
            {
                total += n;
            }
        }
        catch (IOException)
        {
        }
        return total;
    }

    public void Dispose() => Stream.Dispose();

    /// <summary>
    /// A real TLS ClientHello record (what SslStream sends first, offering h2 and http/1.1), captured once from a
    /// handshake against a local socket that never answers.
    /// </summary>
    public static Task<byte[]> ClientHelloAsync() => s_clientHello.Value;

    private static async Task<byte[]> CaptureClientHelloAsync()
    {
        using var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen(1);
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint!).WaitAsync(s_hangGuard);
        using Socket accepted = await listener.AcceptAsync().WaitAsync(s_hangGuard);
        using var tls = new SslStream(new NetworkStream(client, ownsSocket: false));
        Task handshake = tls.AuthenticateAsClientAsync(new SslClientAuthenticationOptions
        {
            TargetHost = "localhost",
            ApplicationProtocols = [SslApplicationProtocol.Http2, SslApplicationProtocol.Http11],
        });

        using var peer = new NetworkStream(accepted, ownsSocket: false);
        byte[] header = new byte[5];
        await peer.ReadExactlyAsync(header).AsTask().WaitAsync(s_hangGuard);
        byte[] record = new byte[5 + ((header[3] << 8) | header[4])];
        header.CopyTo(record, 0);
        await peer.ReadExactlyAsync(record.AsMemory(5)).AsTask().WaitAsync(s_hangGuard);
        accepted.Close(); // the handshake fails: nothing more is wanted from it
        await Assert.ThrowsAnyAsync<Exception>(() => handshake.WaitAsync(s_hangGuard));

        Assert.Equal(0x16, record[0]); // a handshake record
        Assert.Equal(0x01, record[5]); // holding a ClientHello
        return record;
    }
}
