using System.Net;
using System.Security.Cryptography;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Net;
using Microsoft.AspNetCore.Server.Kestrel.Core;

namespace IoUring.AspNetCore.Tests.Client;

/// <summary>
/// HttpClient whose connections run on io_uring (<see cref="SocketsHttpHandlerExtensions.UseIoUring"/>), against
/// Kestrel on each transport: HTTP/1.1, HTTP/2 with prior knowledge (h2c) and HTTP/2 over TLS by ALPN.
/// </summary>
public abstract class HttpClientOnIoUringTests : IAsyncLifetime
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    private readonly IoUringNetwork _network = new(new IoUringNetworkOptions { LoopCount = 2 });

    protected abstract TransportKind ServerTransport { get; }

    public enum Protocol
    {
        Http11,
        H2c,
        H2,
    }

    public static TheoryData<Protocol> Protocols => [Protocol.Http11, Protocol.H2c, Protocol.H2];

    public Task InitializeAsync() => Task.CompletedTask;

    public async Task DisposeAsync()
    {
        await _network.DisposeAsync();
    }

    private Task<TestServer> StartAsync(Protocol protocol) => TestServer.StartAsync(ServerTransport, TestApp.Map(new AppProbe()), o =>
    {
        o.Protocols = protocol == Protocol.H2c ? HttpProtocols.Http2 : HttpProtocols.Http1AndHttp2;
        o.Certificate = protocol == Protocol.H2 ? TestCertificate.Server : null;
    });

    private HttpClient CreateClient(TestServer server, Protocol protocol)
        => server.CreateClient(http2: protocol != Protocol.Http11, new SocketsHttpHandler().UseIoUring(_network));

    [Theory]
    [MemberData(nameof(Protocols))]
    public async Task Requests_reuse_the_connection_and_large_bodies_arrive_intact(Protocol protocol)
    {
        await using TestServer server = await StartAsync(protocol);
        Version version = protocol == Protocol.Http11 ? HttpVersion.Version11 : HttpVersion.Version20;
        using (HttpClient client = CreateClient(server, protocol))
        {
            // One after the other: all on one connection, which is an io_uring connection of ours.
            var ids = new HashSet<string>();
            for (int i = 0; i < 8; i++)
            {
                using HttpResponseMessage response = await client.GetAsync("connection");
                Assert.Equal(version, response.Version);
                ids.Add(await response.Content.ReadAsStringAsync());
            }
            Assert.Single(ids);
            Assert.Equal(1, _network.ConnectionCount);

            // Upload and download at once: over HTTP/1.1 on two connections, over HTTP/2 two streams on one.
            const long UploadLength = (16L << 20) + 7;
            const long DownloadLength = (16L << 20) + 3;
            Task<string> upload = Task.Run(async () =>
            {
                using HttpResponseMessage response = await client.PostAsync("upload", Pattern.Content(UploadLength, chunk: 50_000));
                Assert.Equal(version, response.Version);
                return await response.Content.ReadAsStringAsync();
            });
            Task<(long, string)> download = Task.Run(async () =>
            {
                using HttpResponseMessage response = await client.GetAsync($"download?size={DownloadLength}", HttpCompletionOption.ResponseHeadersRead);
                return await Pattern.HashAsync(await response.Content.ReadAsStreamAsync());
            });
            Assert.Equal(TestApp.Describe(UploadLength), await upload.WaitAsync(s_hangGuard));
            Assert.Equal((DownloadLength, Pattern.Sha256(DownloadLength)), await download.WaitAsync(s_hangGuard));

            int expected = protocol == Protocol.Http11 ? 2 : 1;
            Assert.Equal(expected, server.Connections.All.Count);
            Assert.Equal(expected, _network.ConnectionCount);
            long sent = _network.Loops.Sum(l => l.Counters.BytesSent);
            Assert.True(sent > UploadLength, $"the loops sent {sent} bytes, the upload alone was {UploadLength}");
        }

        // Disposing the client closes its connections: the fds are released and the server sees them go.
        await Eventually.HoldsAsync(() => _network.ConnectionCount == 0);
        Assert.Equal(0, _network.ConnectionCount);
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed)).WaitAsync(s_hangGuard);
    }

    [Theory]
    [MemberData(nameof(Protocols))]
    public async Task Cancelling_mid_body_stops_the_download_and_the_client_goes_on(Protocol protocol)
    {
        await using TestServer server = await StartAsync(protocol);
        using HttpClient client = CreateClient(server, protocol);
        using var cancel = new CancellationTokenSource();
        using (HttpResponseMessage response = await client.GetAsync("stream", HttpCompletionOption.ResponseHeadersRead))
        {
            Stream body = await response.Content.ReadAsStreamAsync();
            byte[] buffer = new byte[1 << 16];
            long read = 0;
            while (read < 4 << 20)
            {
                read += await body.ReadAsync(buffer).AsTask().WaitAsync(s_hangGuard);
            }
            cancel.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(async () =>
            {
                while (await body.ReadAsync(buffer, cancel.Token) > 0)
                {
                }
            });
        }

        // The server's endless response ends: HTTP/1.1 by the connection's close, HTTP/2 by a reset of the stream.
        await server.Connections.First.WaitAsync(s_hangGuard);
        if (protocol == Protocol.Http11)
        {
            await server.Connections.All.Single().Closed.WaitAsync(s_hangGuard);
            await Eventually.HoldsAsync(() => _network.ConnectionCount == 0);
            Assert.Equal(0, _network.ConnectionCount);
        }

        // The client goes on: a new connection for HTTP/1.1, the same one for HTTP/2.
        Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext").WaitAsync(s_hangGuard));
        Assert.Equal(protocol == Protocol.Http11 ? 2 : 1, server.Connections.All.Count);
        Assert.Equal(1, _network.ConnectionCount);
    }
}

public sealed class HttpClientOnIoUringToSocketsTests : HttpClientOnIoUringTests
{
    protected override TransportKind ServerTransport => TransportKind.Sockets;
}

public sealed class HttpClientOnIoUringToIoUringTests : HttpClientOnIoUringTests
{
    protected override TransportKind ServerTransport => TransportKind.IoUring;
}
