using IoUring.AspNetCore.Internal;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Rings;
using IoUring.Testing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Tests.Client;

/// <summary>
/// <c>services.AddHttpClient(...).UseIoUring()</c>: the factory's clients connect on the container's
/// <see cref="IoUringConnectionFactory"/> loops, fall back to sockets with one warning, and say so when they cannot.
/// </summary>
public sealed class HttpClientFactoryOnIoUringTests
{
    private static ServiceProvider BuildServices(TestLogs logs, Action<IoUringTransportOptions>? configure = null, Action<IHttpClientBuilder>? client = null)
    {
        var services = new ServiceCollection();
        services.AddLogging(b => b.AddProvider(logs));
        services.Configure<IoUringTransportOptions>(o =>
        {
            o.LoopCount = 1;
            configure?.Invoke(o);
        });
        IHttpClientBuilder builder = services.AddHttpClient("backend");
        client?.Invoke(builder); // the client's own configuration first, as an app would write it
        builder.UseIoUring();
        return services.BuildServiceProvider();
    }

    private static async Task<TestServer> StartServerAsync() => await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));

    [Fact]
    public async Task The_factorys_clients_connect_on_io_uring_and_stop_with_the_container()
    {
        await using TestServer server = await StartServerAsync();
        var logs = new TestLogs();
        ServiceProvider services = BuildServices(logs);
        IHttpClientFactory factory = services.GetRequiredService<IHttpClientFactory>();
        for (int i = 0; i < 3; i++) // clients share the factory's pooled handler, so its connection
        {
            HttpClient client = factory.CreateClient("backend");
            Assert.Equal("Hello, World!", await client.GetStringAsync(new Uri(server.BaseAddress, "plaintext")));
        }

        IoUring.Net.IoUringNetwork network = services.GetRequiredService<IoUringConnectionFactory>().NetworkOrNull()!;
        Assert.Equal(1, network.ConnectionCount);
        Assert.Single(server.Connections.All);
        logs.AssertNoWarnings();

        // The container owns the loops: disposing it aborts the connection, which the server sees close.
        await services.DisposeAsync();
        Assert.Equal(0, network.ConnectionCount);
        await server.Connections.All.Single().Closed.WaitAsync(TimeSpan.FromSeconds(30));
    }

    [Fact]
    public async Task A_host_serving_on_io_uring_shares_its_loops_with_its_clients()
    {
        // The app calls itself: the inbound and the outbound side of each connection on the same loops.
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()),
            o => o.Services = services => services.AddHttpClient("self").UseIoUring());
        HttpClient client = server.App.Services.GetRequiredService<IHttpClientFactory>().CreateClient("self");
        Assert.Equal("Hello, World!", await client.GetStringAsync(new Uri(server.BaseAddress, "plaintext")));

        var listening = (IoUringTransportFactory)server.App.Services.GetServices<Microsoft.AspNetCore.Connections.IConnectionListenerFactory>().Last();
        IoUring.Net.IoUringNetwork network = server.App.Services.GetRequiredService<IoUringConnectionFactory>().NetworkOrNull()!;
        Assert.Same(listening.Network, network);
        Assert.Equal(2, network.ConnectionCount); // the client's connection and the one the server accepted
        Assert.Equal("IoUringConnectionContext", Assert.Single(server.Connections.All).ContextType);

        // Letting go of the client side leaves the server's loops running.
        await server.App.Services.GetRequiredService<IoUringConnectionFactory>().DisposeAsync();
        Assert.Equal("Hello, World!", await server.CreateClient().GetStringAsync("plaintext"));
    }

    [Fact]
    public async Task Unavailable_io_uring_connects_through_sockets_with_one_warning()
    {
        await using TestServer server = await StartServerAsync();
        var logs = new TestLogs();
        // EPERM at setup: what a seccomp filter or kernel.io_uring_disabled=2 gives.
        await using ServiceProvider services = BuildServices(logs, o => o.ConfigureNetworkForTesting = n => n.Loop.Hooks = new() { SetupErrno = 1 });
        IHttpClientFactory factory = services.GetRequiredService<IHttpClientFactory>();
        Assert.Equal("Hello, World!", await factory.CreateClient("backend").GetStringAsync(new Uri(server.BaseAddress, "plaintext")));
        Assert.Equal("Hello, World!", await factory.CreateClient("backend").GetStringAsync(new Uri(server.BaseAddress, "plaintext")));

        Assert.Null(services.GetRequiredService<IoUringConnectionFactory>().NetworkOrNull());
        TestLogs.LogRecord warning = Assert.Single(logs.Where(IoUringTransportLog.Category, level: LogLevel.Warning));
        Assert.Equal(105, warning.EventId.Id);
        Assert.Contains("HttpClient", warning.Message);
        Assert.Contains("EPERM", warning.Message);
    }

    [Fact]
    public async Task Off_Linux_the_clients_connect_through_sockets_with_one_warning_naming_the_OS()
    {
        await using TestServer server = await StartServerAsync();
        var logs = new TestLogs();
        var macOS = new TestHooks { OtherOperatingSystem = "macOS" };
        await using ServiceProvider services = BuildServices(logs, o => o.ConfigureNetworkForTesting = n => n.Loop.Hooks = macOS);
        IHttpClientFactory factory = services.GetRequiredService<IHttpClientFactory>();
        Assert.Equal("Hello, World!", await factory.CreateClient("backend").GetStringAsync(new Uri(server.BaseAddress, "plaintext")));

        Assert.Null(services.GetRequiredService<IoUringConnectionFactory>().NetworkOrNull());
        TestLogs.LogRecord warning = Assert.Single(logs.Where(IoUringTransportLog.Category, level: LogLevel.Warning));
        Assert.Equal(105, warning.EventId.Id);
        Assert.EndsWith("io_uring needs Linux; this is macOS.", warning.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void A_primary_handler_that_takes_no_connect_callback_is_refused_by_name()
    {
        var logs = new TestLogs();
        using ServiceProvider services = BuildServices(logs, client: b => b.ConfigurePrimaryHttpMessageHandler(() => new HttpClientHandler()));
        IHttpClientFactory factory = services.GetRequiredService<IHttpClientFactory>();
        var ex = Assert.Throws<InvalidOperationException>(() => factory.CreateClient("backend"));
        Assert.Contains("SocketsHttpHandler", ex.Message);
        Assert.Contains("'backend'", ex.Message);
        Assert.Contains(nameof(HttpClientHandler), ex.Message);
    }
}
