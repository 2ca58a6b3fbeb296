using System.Net.Security;
using System.Net.Sockets;
using IoUring.AspNetCore.Tests.Support;
using Microsoft.AspNetCore.Server.Kestrel.Core;

namespace IoUring.AspNetCore.Tests.Conformance;

/// <summary>Tests that count this process's open fds: they run alone, after or before everything else.</summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class FdCountingCollection
{
    public const string Name = "fd counting";
}

/// <summary>Stopping and disposing a host leaves no fd of the transport open. Written once, run on both transports.</summary>
[Collection(FdCountingCollection.Name)]
public abstract class FdHygieneTests
{
    protected abstract TransportKind Transport { get; }

    // The kinds of fd a transport opens: sockets, rings, eventfds, epoll ("fd -> target", so a number reused for a new
    // socket reads as new). Other fds (pipes of child processes that other tests started, closed whenever the
    // finalizer gets to them) would make the set drift by itself; so may another test's socket closing late (a
    // database client's pool): an fd gone is no leak, only one that is new and stays.
    private static HashSet<string> OpenFds()
    {
        GC.Collect();
        GC.WaitForPendingFinalizers();
        var open = new HashSet<string>(StringComparer.Ordinal);
        foreach (string fd in Directory.GetFiles("/proc/self/fd"))
        {
            string? target;
            try
            {
                target = new FileInfo(fd).LinkTarget;
            }
            catch (IOException)
            {
                continue; // closed while listing (the directory listing's own fd, for one)
            }
            if (target is not null && (target.StartsWith("socket:", StringComparison.Ordinal) || target.StartsWith("anon_inode:", StringComparison.Ordinal)))
            {
                open.Add($"{Path.GetFileName(fd)} -> {target}");
            }
        }
        return open;
    }

    /// <summary>The fds open now that were not open in <paramref name="before"/>, once closing had a moment.</summary>
    private static async Task<string[]> NewFdsAsync(HashSet<string> before)
    {
        // Closing is asynchronous in places (the thread pool's socket engine); give it a moment, not a deadline.
        for (int attempt = 0; !OpenFds().IsSubsetOf(before) && attempt < 100; attempt++)
        {
            await Task.Delay(100);
        }
        return [.. OpenFds().Except(before)];
    }

    private async Task ServeAndStopAsync(int connections)
    {
        var probe = new AppProbe();
        await using TestServer server = await TestServer.StartAsync(Transport, TestApp.Map(probe));
        await Task.WhenAll(Enumerable.Range(0, connections).Select(async i =>
        {
            using HttpClient client = server.CreateClient();
            Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));
        }));
        using (Socket reset = await server.ConnectAsync())
        {
            await RawClient.SendAsync(reset, "GET /plaintext HTTP/1.1\r\nHost: test\r\n\r\n");
            await RawClient.ReceiveUntilAsync(reset, t => t.Contains("Hello, World!", StringComparison.Ordinal));
            RawClient.Reset(reset);
        }
        using Socket idle = await server.ConnectAsync(); // still open when the host stops
        await server.StopAsync();
    }

    [Fact]
    public async Task Stopped_and_disposed_host_leaves_no_fd_open()
    {
        await ServeAndStopAsync(2); // warm up: lazily created process-wide fds (epoll, capability probe) stay
        HashSet<string> before = OpenFds();

        await ServeAndStopAsync(20);

        Assert.Empty(await NewFdsAsync(before));
    }

    private async Task ServeHttpsAndStopAsync(int connections)
    {
        await using TestServer server = await TestServer.StartAsync(Transport, TestApp.Map(new AppProbe()), o =>
        {
            o.Certificate = TestCertificate.Server;
            o.Protocols = HttpProtocols.Http1AndHttp2;
        });
        await Task.WhenAll(Enumerable.Range(0, connections).Select(async i =>
        {
            using HttpClient client = server.CreateClient(http2: i % 2 == 0);
            Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));
        }));
        byte[] hello = await TlsClient.ClientHelloAsync();
        foreach (bool reset in new[] { false, true })
        {
            using Socket midHandshake = await server.ConnectAsync();
            await midHandshake.SendAsync(hello.AsMemory(0, hello.Length / 2));
            if (reset)
            {
                RawClient.Reset(midHandshake);
            }
        }
        using (Socket garbage = await server.ConnectAsync())
        {
            await RawClient.SendAsync(garbage, "GET /plaintext HTTP/1.1\r\nHost: test\r\n\r\n");
            await RawClient.DrainAsync(garbage);
        }
        using TlsClient idle = await TlsClient.ConnectAsync(server, SslApplicationProtocol.Http11); // still open when the host stops
        await server.StopAsync();
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed)).WaitAsync(TimeSpan.FromSeconds(60));
    }

    [Fact]
    public async Task Stopped_https_host_after_failed_handshakes_leaves_no_fd_open()
    {
        await ServeHttpsAndStopAsync(2); // warm up
        HashSet<string> before = OpenFds();

        await ServeHttpsAndStopAsync(10);

        Assert.Empty(await NewFdsAsync(before));
    }
}

public sealed class SocketsFdHygieneTests : FdHygieneTests
{
    protected override TransportKind Transport => TransportKind.Sockets;
}

public sealed class IoUringFdHygieneTests : FdHygieneTests
{
    protected override TransportKind Transport => TransportKind.IoUring;
}
