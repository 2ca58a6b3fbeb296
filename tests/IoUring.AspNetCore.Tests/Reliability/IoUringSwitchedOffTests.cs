using System.Net;
using IoUring.AspNetCore.Internal;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Rings;
using IoUring.Testing;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// io_uring switched off. For one real process (a seccomp filter, as container runtimes install, set up by
/// launcher.c): the Kestrel sample falls back to Sockets with one warning, the plain API throws naming the cause.
/// The global sysctl is never touched, so the tests running in parallel keep their io_uring. In process (the setup
/// errno hook): the transport's fallback and ThrowIfUnavailable; off Linux (the operating system hook), the fallback. The plain API's layers: IoUring.Tests' IoUringSwitchedOffTests.
/// </summary>
public sealed class IoUringSwitchedOffTests(LauncherFixture launcher, ITestOutputHelper output) : IClassFixture<LauncherFixture>
{
    private static readonly TimeSpan s_startup = TimeSpan.FromSeconds(60);
    private static readonly string[] s_noIoUring = ["--no-io-uring", "--lifetime", "300"];

    [Fact]
    public async Task Kestrel_sample_serves_on_Sockets_with_one_warning_naming_the_cause()
    {
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, s_noIoUring, RepoFiles.Sample("KestrelSample"), ["--urls", "http://127.0.0.1:0"]);

        int port = await child.WaitForKestrelPortAsync(s_startup);
        string transport = await child.WaitForLineAsync(l => l.StartsWith("Transport:", StringComparison.Ordinal), s_startup);
        using var client = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{port}/"), Timeout = s_startup };
        using HttpResponseMessage response = await client.GetAsync("plaintext");
        string body = await response.Content.ReadAsStringAsync();
        string seccomp = child.Status("Seccomp") ?? "?";
        output.WriteLine(child.Output);

        Assert.Equal("2", seccomp); // the server process itself runs under the filter (2 = SECCOMP_MODE_FILTER)
        Assert.Equal("Transport: Sockets (io_uring unavailable, see the warning above)", transport);
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal("Hello, World!", body);
        // The console logger writes "warn: Category[EventId]" and the message on the next line.
        IReadOnlyList<string> lines = child.Lines;
        int[] warnings = [.. Enumerable.Range(0, lines.Count).Where(i => lines[i].StartsWith("warn:", StringComparison.Ordinal))];
        int warning = Assert.Single(warnings);
        Assert.Equal("warn: IoUring.AspNetCore.Transport[100]", lines[warning]);
        string message = lines[warning + 1];
        Assert.Contains("io_uring is unavailable, so Kestrel serves through its Sockets transport instead", message);
        Assert.Contains("EPERM", message);
        Assert.Contains("seccomp", message);
        Assert.DoesNotContain(lines, l => l.StartsWith("fail:", StringComparison.Ordinal) || l.StartsWith("crit:", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Plain_api_throws_IoUringUnavailableException_naming_the_cause()
    {
        // The Echo sample's first statement is `new IoUringNetwork()`: unhandled, the exception ends the process.
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, s_noIoUring, RepoFiles.Sample("Echo"), ["server", "0"]);

        int exitCode = await child.WaitForExitAsync(s_startup);
        output.WriteLine($"exit code {exitCode}\n{child.Output}");

        Assert.NotEqual(0, exitCode);
        string error = Assert.Single(child.Lines, l => l.StartsWith("Unhandled exception.", StringComparison.Ordinal));
        Assert.StartsWith("Unhandled exception. IoUring.Rings.IoUringUnavailableException: ", error);
        Assert.Contains("EPERM", error);
        Assert.Contains("kernel.io_uring_disabled", error);
        Assert.Contains("seccomp", error);
        Assert.Contains(child.Lines, l => l.Contains("at IoUring.Net.IoUringNetwork..ctor", StringComparison.Ordinal));
        Assert.DoesNotContain(child.Lines, l => l.StartsWith("echo server on", StringComparison.Ordinal));
    }

    [Fact]
    public async Task Unavailable_io_uring_falls_back_to_sockets_with_one_warning()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o =>
        {
            o.IoUring = u => u.ConfigureNetworkForTesting = n => n.Loop.Hooks = new() { SetupErrno = 1 }; // EPERM: what a seccomp filter or io_uring_disabled=2 gives
            o.Kestrel = k => k.Listen(IPAddress.Loopback, 0); // a second endpoint: still one warning
        });
        using HttpClient client = server.CreateClient();

        Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));

        Assert.Equal("SocketConnection", server.Connections.All.Single().ContextType);
        TestLogs.LogRecord warning = Assert.Single(server.Logs.Where(IoUringTransportLog.Category, level: LogLevel.Warning));
        Assert.Equal(100, warning.EventId.Id);
        Assert.Contains("EPERM", warning.Message);
        var factory = (IoUringTransportFactory)server.App.Services.GetServices<IConnectionListenerFactory>().Last();
        Assert.True(factory.IsFallbackActive);
    }

    [Fact]
    public async Task Off_Linux_Kestrel_serves_on_Sockets_with_one_warning_naming_the_OS()
    {
        var windows = new TestHooks { OtherOperatingSystem = "Windows" };
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o =>
            o.IoUring = u => u.ConfigureNetworkForTesting = n => n.Loop.Hooks = windows);
        using HttpClient client = server.CreateClient();

        Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));

        Assert.Equal("SocketConnection", server.Connections.All.Single().ContextType);
        TestLogs.LogRecord warning = Assert.Single(server.Logs.Where(IoUringTransportLog.Category, level: LogLevel.Warning));
        Assert.Equal(100, warning.EventId.Id);
        Assert.EndsWith("io_uring needs Linux; this is Windows.", warning.Message, StringComparison.Ordinal);
    }

    // "Before any native call" observed for real: each body runs in a process of its own where the first io_uring
    // system call kills it (SIGSYS), so a body that ends normally made none. The control shows the filter catches one.
    [Fact]
    public async Task Off_Linux_neither_the_plain_api_nor_Kestrel_makes_an_io_uring_system_call()
    {
        (int status, string seen) = await RunChildAsync(nameof(OffLinuxChild.RealRing));
        Assert.True(status == 128 + 31, $"the control made a real ring and was not killed by SIGSYS: {status}\n{seen}");
        Assert.DoesNotContain("made a ring", seen, StringComparison.Ordinal);

        (status, seen) = await RunChildAsync(nameof(OffLinuxChild.PlainApi));
        Assert.True(status == 0, $"the plain API off Linux ended with {status}:\n{seen}");
        Assert.Contains("network: io_uring needs Linux; this is Windows.", seen, StringComparison.Ordinal);
        Assert.Contains("loop: io_uring needs Linux; this is Windows.", seen, StringComparison.Ordinal);
        Assert.Contains("probe: supported False, io_uring needs Linux; this is Windows.", seen, StringComparison.Ordinal);

        (status, seen) = await RunChildAsync(nameof(OffLinuxChild.Kestrel));
        Assert.True(status == 0, $"Kestrel off Linux ended with {status}:\n{seen}");
        Assert.Contains("served: Hello, World!", seen, StringComparison.Ordinal);
        Assert.Contains("connection: SocketConnection", seen, StringComparison.Ordinal);
    }

    private async Task<(int Status, string Output)> RunChildAsync(string body)
    {
        (int status, string seen) = await ChildProcess.RunAsync(launcher.Path,
            ["--kill-on-io-uring", "--lifetime", "120", "--", ChildProcess.DotnetHost(),
                typeof(OffLinuxChild).Assembly.Location, "--call", $"{typeof(OffLinuxChild).FullName}.{body}"],
            TimeSpan.FromSeconds(120));
        output.WriteLine($"{body}: exit {status}\n{seen}");
        return (status, seen);
    }

    [Fact]
    public async Task Unavailable_io_uring_fails_the_start_when_asked_to()
    {
        Exception error = await Assert.ThrowsAnyAsync<Exception>(() => TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o =>
            o.IoUring = u => { u.ConfigureNetworkForTesting = n => n.Loop.Hooks = new() { SetupErrno = 1 }; u.ThrowIfUnavailable = true; }));

        IoUringUnavailableException unavailable = Assert.IsType<IoUringUnavailableException>(error);
        Assert.Equal(1, unavailable.Errno);
    }
}
