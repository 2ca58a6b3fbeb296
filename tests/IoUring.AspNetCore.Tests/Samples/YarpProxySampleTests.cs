using System.Net;
using System.Net.WebSockets;
using IoUring.AspNetCore.Tests.Support;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.Extensions.DependencyInjection;
using YarpProxy;

namespace IoUring.AspNetCore.Tests.Samples;

/// <summary>
/// samples/YarpProxy (YARP 2.3) in front of a Kestrel backend: inbound on the io_uring transport, outbound through
/// HttpClient connections on io_uring; bodies, headers and a WebSocket upgrade go through intact.
/// </summary>
public sealed class YarpProxySampleTests : IAsyncLifetime
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    private TestServer _backend = null!;
    private WebApplication _proxy = null!;
    private Uri _proxyAddress = null!;

    public async Task InitializeAsync()
    {
        _backend = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        _proxy = ProxyApp.Build(["--backend", _backend.BaseAddress.ToString(), "--urls", "http://127.0.0.1:0"]);
        await _proxy.StartAsync().WaitAsync(s_hangGuard);
        _proxyAddress = new Uri(_proxy.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.Single() + "/");
    }

    public async Task DisposeAsync()
    {
        await _proxy.DisposeAsync();
        await _backend.DisposeAsync();
    }

    [Fact]
    public async Task Requests_bodies_and_headers_go_through_on_io_uring_both_ways()
    {
        Assert.Equal("Inbound: io_uring, outbound: io_uring", ProxyApp.Describe(_proxy));
        using var client = new HttpClient { BaseAddress = _proxyAddress, Timeout = s_hangGuard };

        Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));

        using var request = new HttpRequestMessage(HttpMethod.Get, "headers") { Headers = { { "X-Test", "through the proxy" } } };
        using HttpResponseMessage headers = await client.SendAsync(request);
        string[] seen = (await headers.Content.ReadAsStringAsync()).Split('\n');
        Assert.Contains("X-Test: through the proxy", seen);
        Assert.Contains("X-Forwarded-For: 127.0.0.1", seen);
        Assert.Contains($"X-Forwarded-Host: {_proxyAddress.Authority}", seen);
        Assert.Equal("yes", Assert.Single(headers.Headers.GetValues("X-Backend")));

        const long Length = (16L << 20) + 5;
        using (HttpResponseMessage upload = await client.PostAsync("upload", Pattern.Content(Length, chunk: 40_000)))
        {
            Assert.Equal(TestApp.Describe(Length), await upload.Content.ReadAsStringAsync());
        }
        using (HttpResponseMessage download = await client.GetAsync($"download?size={Length}", HttpCompletionOption.ResponseHeadersRead))
        {
            Assert.Equal((Length, Pattern.Sha256(Length)), await Pattern.HashAsync(await download.Content.ReadAsStreamAsync()));
        }

        // The proxy's connections to the backend are io_uring ones, on the loops that accepted the client's.
        IoUring.Net.IoUringNetwork outbound = _proxy.Services.GetRequiredService<IoUringConnectionFactory>().NetworkOrNull()!;
        var inbound = (IoUringTransportFactory)_proxy.Services.GetServices<Microsoft.AspNetCore.Connections.IConnectionListenerFactory>().Last();
        Assert.Same(inbound.Network, outbound);
        Assert.InRange(outbound.ConnectionCount, 2, 1 + _backend.Connections.All.Count);
        Assert.All(_backend.Connections.All, c => Assert.Equal("IoUringConnectionContext", c.ContextType));
    }

    [Fact]
    public async Task A_websocket_upgrade_goes_through_and_echoes()
    {
        using var socket = new ClientWebSocket();
        await socket.ConnectAsync(new Uri($"ws://{_proxyAddress.Authority}/ws"), CancellationToken.None).WaitAsync(s_hangGuard);
        byte[] binary = Pattern.Bytes(0, (1 << 20) + 1);
        foreach ((byte[] message, WebSocketMessageType type) in new[] { ("hello"u8.ToArray(), WebSocketMessageType.Text), (binary, WebSocketMessageType.Binary) })
        {
            await socket.SendAsync(message, type, endOfMessage: true, CancellationToken.None);
            var received = new MemoryStream();
            byte[] buffer = new byte[1 << 16];
            ValueWebSocketReceiveResult result;
            do
            {
                result = await socket.ReceiveAsync(buffer.AsMemory(), CancellationToken.None).AsTask().WaitAsync(s_hangGuard);
                received.Write(buffer, 0, result.Count);
            }
            while (!result.EndOfMessage);
            Assert.Equal(type, result.MessageType);
            Assert.Equal(message, received.ToArray());
        }
        await socket.CloseAsync(WebSocketCloseStatus.NormalClosure, "done", CancellationToken.None).WaitAsync(s_hangGuard);
        Assert.Equal(WebSocketCloseStatus.NormalClosure, socket.CloseStatus);
    }

    [Theory]
    [InlineData(new[] { "--urls", "http://127.0.0.1:0" }, "--backend")]
    [InlineData(new[] { "--backend", "ftp://127.0.0.1/" }, "--backend")]
    [InlineData(new[] { "--backend", "http://127.0.0.1:1/", "--transport", "epoll" }, "--transport")]
    public void Bad_arguments_are_refused_by_name(string[] args, string named)
    {
        var ex = Assert.Throws<ArgumentException>(() => ProxyApp.Build(args));
        Assert.StartsWith(named + ":", ex.Message, StringComparison.Ordinal);
    }
}
