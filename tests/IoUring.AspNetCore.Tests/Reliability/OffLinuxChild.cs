using IoUring.AspNetCore.Tests.Support;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// The bodies <see cref="IoUringSwitchedOffTests"/> runs in a process of their own (the test assembly's
/// <c>--call</c>) under launcher.c's <c>--kill-on-io-uring</c>: a run that ends with status 0 made no io_uring system
/// call. What each saw goes to stdout, one line each.
/// </summary>
internal static class OffLinuxChild
{
    private static TestHooks Windows => new() { OtherOperatingSystem = "Windows" };

    /// <summary>Every way into the plain API, as if on Windows.</summary>
    public static int PlainApi()
    {
        Report("network", () => new IoUringNetwork(
            new IoUringNetworkOptions { LoopCount = 2, Loop = { Hooks = Windows } }).Dispose());
        Report("loop", () => new EventLoop(new EventLoopOptions { Hooks = Windows }).Dispose());
        IoUringCapabilities caps = IoUringCapabilities.Probe(new RingOptions { SqEntries = 8, Hooks = Windows });
        Console.WriteLine($"probe: supported {caps.IsSupported}, {caps.UnavailableReason}");
        return 0;
    }

    /// <summary>Kestrel with UseIoUring(), as if on Windows: it serves on Sockets.</summary>
    public static int Kestrel() => KestrelAsync().GetAwaiter().GetResult();

    private static async Task<int> KestrelAsync()
    {
        TestHooks windows = Windows;
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()),
            o => o.IoUring = u => u.ConfigureNetworkForTesting = n => n.Loop.Hooks = windows);
        using HttpClient client = server.CreateClient();
        Console.WriteLine($"served: {await client.GetStringAsync("plaintext")}");
        Console.WriteLine($"connection: {server.Connections.All.Single().ContextType}");
        return 0;
    }

    /// <summary>The control: a real ring, which the filter must stop.</summary>
    public static int RealRing()
    {
        using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        Console.WriteLine("made a ring");
        return 0;
    }

    private static void Report(string what, Action create)
    {
        try
        {
            create();
            Console.WriteLine($"{what}: made");
        }
        catch (IoUringUnavailableException ex)
        {
            Console.WriteLine($"{what}: {ex.Message}");
        }
    }
}
