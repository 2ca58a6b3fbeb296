using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography.X509Certificates;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.AspNetCore.Server.Kestrel.Https;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>What a test may change about its server.</summary>
public sealed class TestServerOptions
{
    /// <summary>The endpoint to listen on; 127.0.0.1:0 when null.</summary>
    public EndPoint? EndPoint { get; set; }

    public HttpProtocols Protocols { get; set; } = HttpProtocols.Http1;

    /// <summary>The transport's MaxReadBufferSize, set on whichever transport runs.</summary>
    public long? MaxReadBufferSize { get; set; } = 1024 * 1024;

    /// <summary>UnsafePreferInlineScheduling, set on whichever transport runs.</summary>
    public bool InlineScheduling { get; set; }

    public Action<KestrelServerOptions>? Kestrel { get; set; }

    public Action<IoUringTransportOptions>? IoUring { get; set; }

    /// <summary>Further services of the host (OpenTelemetry, gRPC), added before it is built.</summary>
    public Action<IServiceCollection>? Services { get; set; }

    public TimeSpan ShutdownTimeout { get; set; } = TimeSpan.FromSeconds(30);

    /// <summary>Serve HTTPS with this certificate (TLS above the connection tracker, so it sees the transport's connections).</summary>
    public X509Certificate2? Certificate { get; set; }

    /// <summary>Further HTTPS settings, when <see cref="Certificate"/> is set.</summary>
    public Action<HttpsConnectionAdapterOptions>? Https { get; set; }
}

/// <summary>
/// A real Kestrel host on the chosen transport, bound to a fresh endpoint, with its logs collected and every
/// connection's ConnectionClosed watched by a connection middleware.
/// </summary>
public sealed class TestServer : IAsyncDisposable
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);
    private int _stopped;

    private TestServer(WebApplication app, TestLogs logs, ConnectionTracker connections, TransportKind kind)
    {
        App = app;
        Logs = logs;
        Connections = connections;
        Transport = kind;
        string address = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First();
        if (address.StartsWith("http://unix:", StringComparison.Ordinal))
        {
            BaseAddress = new Uri("http://localhost/");
        }
        else
        {
            BaseAddress = new Uri(address.EndsWith('/') ? address : address + "/");
            Port = BaseAddress.Port;
        }
    }

    public WebApplication App { get; }

    public TestLogs Logs { get; }

    public ConnectionTracker Connections { get; }

    public TransportKind Transport { get; }

    public Uri BaseAddress { get; }

    public int Port { get; }

    public IPEndPoint EndPoint => new(IPAddress.Loopback, Port);

    public bool IsHttps => BaseAddress.Scheme == Uri.UriSchemeHttps;

    public static async Task<TestServer> StartAsync(TransportKind kind, Action<WebApplication> configureApp, Action<TestServerOptions>? configure = null)
    {
        var options = new TestServerOptions();
        configure?.Invoke(options);
        var logs = new TestLogs();
        var connections = new ConnectionTracker();

        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder();
        builder.Logging.ClearProviders();
        builder.Logging.AddProvider(logs);
        builder.Logging.SetMinimumLevel(LogLevel.Information);
        builder.Logging.AddFilter("IoUring", LogLevel.Debug);
        builder.Logging.AddFilter("Microsoft.AspNetCore.Server.Kestrel.Transport", LogLevel.Debug);
        builder.Services.Configure<HostOptions>(o => o.ShutdownTimeout = options.ShutdownTimeout);
        if (kind == TransportKind.Sockets)
        {
            builder.WebHost.UseSockets(o =>
            {
                o.MaxReadBufferSize = options.MaxReadBufferSize;
                o.UnsafePreferInlineScheduling = options.InlineScheduling;
            });
        }
        else
        {
            builder.WebHost.UseIoUring(o =>
            {
                o.LoopCount = 2;
                o.MaxReadBufferSize = options.MaxReadBufferSize;
                o.UnsafePreferInlineScheduling = options.InlineScheduling;
                options.IoUring?.Invoke(o);
            });
        }
        builder.WebHost.ConfigureKestrel(k =>
        {
            k.Limits.MaxRequestBodySize = null;
            k.Limits.MinRequestBodyDataRate = null;
            k.Limits.MinResponseDataRate = null;
            k.Listen(options.EndPoint ?? new IPEndPoint(IPAddress.Loopback, 0), listen =>
            {
                listen.Protocols = options.Protocols;
                listen.Use(next => async connection =>
                {
                    connections.Track(connection);
                    await next(connection);
                });
                if (options.Certificate is { } certificate)
                {
                    var https = new HttpsConnectionAdapterOptions { ServerCertificate = certificate };
                    options.Https?.Invoke(https);
                    listen.UseHttps(https);
                }
            });
            options.Kestrel?.Invoke(k);
        });
        options.Services?.Invoke(builder.Services);
        WebApplication app = builder.Build();
        configureApp(app);
        await app.StartAsync().WaitAsync(s_hangGuard);
        return new TestServer(app, logs, connections, kind);
    }

    /// <summary>
    /// An HttpClient for this server; HTTP/2 when <paramref name="http2"/> (with prior knowledge over TCP, offered alone
    /// by ALPN over TLS), else HTTP/1.1 (offered alone over TLS). Over TLS it trusts exactly the test certificate.
    /// </summary>
    public HttpClient CreateClient(bool http2 = false, SocketsHttpHandler? handler = null)
    {
        handler ??= new SocketsHttpHandler();
        if (IsHttps)
        {
            handler.SslOptions.RemoteCertificateValidationCallback ??= TestCertificate.Pinned;
        }
        return new HttpClient(handler)
        {
            BaseAddress = BaseAddress,
            Timeout = s_hangGuard,
            DefaultRequestVersion = http2 ? HttpVersion.Version20 : HttpVersion.Version11,
            DefaultVersionPolicy = http2 ? HttpVersionPolicy.RequestVersionExact : HttpVersionPolicy.RequestVersionOrLower,
        };
    }

    /// <summary>A raw TCP client connected to the server.</summary>
    public async Task<Socket> ConnectAsync()
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        await socket.ConnectAsync(EndPoint).WaitAsync(s_hangGuard);
        return socket;
    }

    public async Task StopAsync()
    {
        if (Interlocked.Exchange(ref _stopped, 1) == 0)
        {
            await App.StopAsync().WaitAsync(s_hangGuard);
        }
    }

    public async ValueTask DisposeAsync()
    {
        await StopAsync();
        await App.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
    }
}

/// <summary>Every connection Kestrel got, and whether its ConnectionClosed token fired (and how often).</summary>
public sealed class ConnectionTracker
{
    private readonly ConcurrentDictionary<string, Tracked> _connections = new();
    private readonly TaskCompletionSource<Tracked> _first = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public IReadOnlyCollection<Tracked> All => _connections.Values.ToArray();

    public Task<Tracked> First => _first.Task;

    internal void Track(ConnectionContext connection)
    {
        var tracked = new Tracked(connection.ConnectionId, connection.GetType().Name,
            connection.Features.Get<Microsoft.AspNetCore.Connections.Features.IMemoryPoolFeature>()?.MemoryPool.GetType().FullName);
        _connections[connection.ConnectionId] = tracked;
        connection.ConnectionClosed.Register(static s => ((Tracked)s!).OnClosed(), tracked);
        _first.TrySetResult(tracked);
    }

    public Tracked Get(string connectionId) => _connections[connectionId];

    public sealed class Tracked(string id, string contextType, string? memoryPoolType)
    {
        private readonly TaskCompletionSource _closed = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private int _closedCount;

        public string Id { get; } = id;

        /// <summary>The transport's ConnectionContext type (SocketConnection, IoUringConnectionContext).</summary>
        public string ContextType { get; } = contextType;

        /// <summary>The memory pool the transport's pipes use.</summary>
        public string? MemoryPoolType { get; } = memoryPoolType;

        public Task Closed => _closed.Task;

        public int ClosedCount => Volatile.Read(ref _closedCount);

        /// <summary>The thread ConnectionClosed fired on (never a transport's I/O thread).</summary>
        public string? ClosedOnThread { get; private set; }

        internal void OnClosed()
        {
            ClosedOnThread = Thread.CurrentThread.Name;
            Interlocked.Increment(ref _closedCount);
            _closed.TrySetResult();
        }
    }
}
