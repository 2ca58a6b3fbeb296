using IoUring.AspNetCore;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.DataProtection;
using Yarp.ReverseProxy.Configuration;
using Yarp.ReverseProxy.Forwarder;

namespace YarpProxy;

/// <summary>The proxy's host, built from its command line (also by the tests, which run it in their own process).</summary>
public static class ProxyApp
{
    /// <summary>Builds the proxy: <c>--backend URL</c>, <c>--transport iouring|sockets</c>, <c>--urls</c>.</summary>
    /// <exception cref="ArgumentException">A missing or invalid argument; the message says which.</exception>
    public static WebApplication Build(string[] args)
    {
        WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(args);
        string backend = builder.Configuration["backend"] ?? "";
        if (!Uri.TryCreate(backend, UriKind.Absolute, out Uri? backendUri) || backendUri.Scheme is not ("http" or "https"))
        {
            throw new ArgumentException($"--backend: give the backend's http:// or https:// URL (got '{backend}').");
        }
        string transport = builder.Configuration["transport"] ?? "iouring";
        switch (transport)
        {
            case "iouring":
                builder.WebHost.UseIoUring();
                builder.Services.AddSingleton<IoUringConnectionFactory>();
                builder.Services.AddSingleton<IForwarderHttpClientFactory, IoUringForwarderHttpClientFactory>();
                break;
            case "sockets":
                builder.WebHost.UseSockets();
                break;
            default:
                throw new ArgumentException($"--transport: use iouring or sockets (got '{transport}').");
        }
        if (string.IsNullOrEmpty(builder.Configuration["urls"]))
        {
            builder.WebHost.UseUrls("http://127.0.0.1:8080");
        }
        // YARP asks for data protection (session affinity cookies, not used here): keys in memory, nothing on disk.
        builder.Services.AddSingleton<IDataProtectionProvider>(new EphemeralDataProtectionProvider());
        builder.Logging.SetMinimumLevel(LogLevel.Warning);
        builder.Logging.AddFilter("Microsoft.Hosting.Lifetime", LogLevel.Information);

        // One route: everything to the one backend.
        builder.Services.AddReverseProxy().LoadFromMemory(
            [new RouteConfig { RouteId = "all", ClusterId = "backend", Match = new RouteMatch { Path = "{**catch-all}" } }],
            [new ClusterConfig { ClusterId = "backend", Destinations = new Dictionary<string, DestinationConfig> { ["backend"] = new() { Address = backend } } }]);

        WebApplication app = builder.Build();
        app.MapReverseProxy();
        return app;
    }

    /// <summary>"Inbound: io_uring, outbound: io_uring" once started: what each direction actually runs on.</summary>
    public static string Describe(WebApplication app)
    {
        bool inbound = app.Services.GetServices<IConnectionListenerFactory>().LastOrDefault() is IoUringTransportFactory { IsFallbackActive: false };
        bool outbound = app.Services.GetService<IForwarderHttpClientFactory>() is IoUringForwarderHttpClientFactory { OnIoUring: true };
        return $"Inbound: {(inbound ? "io_uring" : "Sockets")}, outbound: {(outbound ? "io_uring" : "Sockets")}";
    }
}

/// <summary>YARP's HttpClient factory with its connections on io_uring (sockets where io_uring is unavailable).</summary>
public sealed class IoUringForwarderHttpClientFactory(IoUringConnectionFactory connections) : ForwarderHttpClientFactory
{
    /// <summary>Whether the handlers made so far connect through io_uring.</summary>
    public bool OnIoUring { get; private set; }

    protected override void ConfigureHandler(ForwarderHttpClientContext context, SocketsHttpHandler handler)
    {
        base.ConfigureHandler(context, handler);
        OnIoUring = connections.ConfigureHttpHandler(handler);
    }
}
