using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A DNS-like UDP request/response server measured in <b>datagrams answered per server CPU-second</b>: each server runs
/// in its own process pinned to CPU 0 (taskset), one load generator process pinned to CPU 1 drives it, and the server's
/// CPU time (utime + stime, /proc/PID/stat) over each measured window is what the answers are divided by. Servers:
/// System.Net.Sockets (its zero-allocation <c>ReceiveFromAsync(Memory, SocketFlags, SocketAddress)</c> and
/// <c>SendToAsync(ReadOnlyMemory, SocketFlags, SocketAddress)</c>), <see cref="IoUringUdpSocket"/> with the same
/// per-datagram code (<c>ReceiveFromAsync</c>/<c>SendToAsync</c>), and <see cref="IoUringUdpSocket"/> with
/// <see cref="IoUringUdpSocket.ReceiveBatchAsync"/>. All servers run at once; the windows alternate between them, round
/// after round, and each ratio is the median of its rounds.
/// <code>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --udp-responder [rounds] [seconds] [sizes]</code>
/// (defaults 7 rounds of 3 s, sizes 64,512,1400). With UDP_RESPONDER_BASE set to another build's
/// IoUring.Benchmarks.dll, that build's two io_uring servers run beside these and each pair's ratio is printed. The request and the answer have the given size; the answer is the
/// request with the DNS header's QR bit set, as a responder that builds its answer in the request's buffer does.
/// </summary>
public static class UdpResponder
{
    private const int Workers = 16;          // concurrent receives per per-datagram server (each answers, then receives again)
    private const int ClientSockets = 8, Window = 8; // the load: datagrams in flight per client socket

    private static readonly string[] Servers = BaseBuild is null
        ? ["sockets", "iouring", "iouring-batch"]
        : ["sockets", "iouring", "iouring-batch", "iouring-base", "iouring-batch-base"];

    /// <summary>UDP_RESPONDER_BASE: another build's IoUring.Benchmarks.dll, whose io_uring servers run beside this
    /// build's (the before/after pair of a change; their ratio is printed per size).</summary>
    private static string? BaseBuild => Environment.GetEnvironmentVariable("UDP_RESPONDER_BASE") is { Length: > 0 } dll
        ? dll : null;

    public static void Run(string[] args)
    {
        int Arg(int index, int fallback) => args.Length > index ? int.Parse(args[index], CultureInfo.InvariantCulture) : fallback;
        int rounds = Arg(0, 7), seconds = Arg(1, 3);
        int[] sizes = args.Length > 2 ? args[2].Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray() : [64, 512, 1400];
        Console.WriteLine($"UDP responder: {rounds} rounds of {seconds} s per server and size; server on CPU 0, load on CPU 1; {Environment.ProcessorCount} CPUs");
        foreach (int size in sizes)
        {
            Measure(size, rounds, seconds);
        }
    }

    private static void Measure(int size, int rounds, int seconds)
    {
        var servers = Servers.Select(kind => kind.EndsWith("-base", StringComparison.Ordinal)
            ? Child.StartProgram(0, "dotnet", BaseBuild!, "--udp-server", kind[..^"-base".Length])
            : Child.Start(0, "--udp-server", kind)).ToArray();
        try
        {
            int[] ports = servers.Select(s => int.Parse(s.ReadLine("port "), CultureInfo.InvariantCulture)).ToArray();
            var perCpuSecond = Servers.Select(_ => new List<double>()).ToArray();
            var perSecond = Servers.Select(_ => new List<double>()).ToArray();
            var cpuShare = Servers.Select(_ => new List<double>()).ToArray();
            for (int round = -1; round < rounds; round++) // round -1 warms every server up (JIT tiers, pools)
            {
                for (int i = 0; i < servers.Length; i++)
                {
                    int s = round % 2 == 0 ? i : servers.Length - 1 - i; // order flipped each round
                    (long answers, TimeSpan cpu, TimeSpan wall) = MeasureWindow(servers[s], ports[s], size, round < 0 ? 2 * seconds : seconds);
                    if (round >= 0)
                    {
                        perCpuSecond[s].Add(answers / cpu.TotalSeconds);
                        perSecond[s].Add(answers / wall.TotalSeconds);
                        cpuShare[s].Add(cpu / wall);
                    }
                }
            }
            for (int s = 0; s < servers.Length; s++)
            {
                double[] ratios = perCpuSecond[s].Zip(perCpuSecond[0], (a, b) => a / b).ToArray();
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"{size,5} B  {Servers[s],-14} {Median(perCpuSecond[s]),10:N0} answers/CPU-s  ratio {Median(ratios):F2} " +
                    $"(min {ratios.Min():F2}, max {ratios.Max():F2})  {Median(perSecond[s]),9:N0} answers/s  server CPU {Median(cpuShare[s]):P0}"));
            }
            for (int s = 0; s < servers.Length; s++)
            {
                int b = Array.IndexOf(Servers, Servers[s] + "-base");
                if (b < 0)
                {
                    continue;
                }
                double[] ratios = perCpuSecond[s].Zip(perCpuSecond[b], (x, y) => x / y).ToArray();
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"{size,5} B  {Servers[s]} / {Servers[b]}: ratio {Median(ratios):F3} (min {ratios.Min():F3}, " +
                    $"max {ratios.Max():F3}, {ratios.Length} rounds)"));
            }
        }
        finally
        {
            foreach (Child server in servers)
            {
                server.Dispose();
            }
        }
    }

    /// <summary>One measured window against one server: the load generator's answers, and the server's CPU time and wall time meanwhile.</summary>
    private static (long Answers, TimeSpan Cpu, TimeSpan Wall) MeasureWindow(Child server, int port, int size, int seconds)
    {
        using Child client = Child.Start(1, "--udp-load", port.ToString(CultureInfo.InvariantCulture), size.ToString(CultureInfo.InvariantCulture), seconds.ToString(CultureInfo.InvariantCulture));
        client.ReadLine("start");
        TimeSpan cpuBefore = server.CpuTime();
        long startTicks = Stopwatch.GetTimestamp();
        long answers = long.Parse(client.ReadLine("answers "), CultureInfo.InvariantCulture);
        TimeSpan wall = Stopwatch.GetElapsedTime(startTicks);
        TimeSpan cpu = server.CpuTime() - cpuBefore;
        return (answers, cpu, wall);
    }

    /// <summary>The median of <paramref name="values"/> (the UDP benchmarks' rounds).</summary>
    internal static double Median(IEnumerable<double> values)
    {
        double[] sorted = [.. values.Order()];
        return sorted.Length % 2 == 1 ? sorted[sorted.Length / 2] : (sorted[sorted.Length / 2 - 1] + sorted[sorted.Length / 2]) / 2;
    }

    // ---- the server processes ----

    /// <summary><c>--udp-server sockets|iouring|iouring-batch</c>: prints "port N", answers until its stdin closes.</summary>
    public static void Serve(string kind)
    {
        using var stop = new CancellationTokenSource();
        Task serving = kind switch
        {
            "sockets" => ServeSocketsAsync(stop.Token),
            "iouring" => ServeIoUringAsync(batch: false, stop.Token),
            "iouring-batch" => ServeIoUringAsync(batch: true, stop.Token),
            _ => throw new ArgumentException($"unknown server {kind}"),
        };
        _ = Console.In.ReadToEnd(); // the runner closes stdin when done
        stop.Cancel();
        try
        {
            serving.Wait(TimeSpan.FromSeconds(5));
        }
        catch (AggregateException)
        {
            // cancelled
        }
    }

    private static async Task ServeSocketsAsync(CancellationToken stop)
    {
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        Console.WriteLine($"port {((IPEndPoint)socket.LocalEndPoint!).Port}");
        await Task.WhenAll(Enumerable.Range(0, Workers).Select(_ => Task.Run(async () =>
        {
            var buffer = new byte[2048];
            var from = new SocketAddress(AddressFamily.InterNetwork);
            while (!stop.IsCancellationRequested)
            {
                int length = await socket.ReceiveFromAsync(buffer, SocketFlags.None, from, stop).ConfigureAwait(false);
                Answer(buffer, length);
                await socket.SendToAsync(buffer.AsMemory(0, length), SocketFlags.None, from, stop).ConfigureAwait(false);
            }
        }))).ConfigureAwait(false);
    }

    private static async Task ServeIoUringAsync(bool batch, CancellationToken stop)
    {
        await using var network = new IoUringNetwork();
        await using IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0), new IoUringUdpOptions { MaxDatagramSize = 2048, ReceiveBufferCount = 256 });
        Console.WriteLine($"port {((IPEndPoint)socket.LocalEndPoint).Port}");
        if (batch)
        {
            await Task.Run(async () =>
            {
                var datagrams = new UdpDatagramBatch(64, 2048);
                while (!stop.IsCancellationRequested)
                {
                    int count = await socket.ReceiveBatchAsync(datagrams, stop).ConfigureAwait(false);
                    for (int i = 0; i < count; i++)
                    {
                        Memory<byte> request = datagrams.GetPayload(i);
                        Answer(request.Span, request.Length);
                        await socket.SendToAsync(request, datagrams.GetAddress(i), stop).ConfigureAwait(false);
                    }
                }
            }, stop).ConfigureAwait(false);
            return;
        }
        await Task.WhenAll(Enumerable.Range(0, Workers).Select(_ => Task.Run(async () =>
        {
            var buffer = new byte[2048];
            var from = new SocketAddress(AddressFamily.InterNetwork);
            while (!stop.IsCancellationRequested)
            {
                DatagramResult received = await socket.ReceiveFromAsync(buffer, from, stop).ConfigureAwait(false);
                Answer(buffer, received.BytesReceived);
                await socket.SendToAsync(buffer.AsMemory(0, received.BytesReceived), from, stop).ConfigureAwait(false);
            }
        }, stop))).ConfigureAwait(false);
    }

    /// <summary>The DNS header's QR bit (byte 2, top bit): this is an answer.</summary>
    private static void Answer(Span<byte> datagram, int length)
    {
        if (length > 2)
        {
            datagram[2] |= 0x80;
        }
    }

    // ---- the load generator ----

    /// <summary>
    /// <c>--udp-load PORT SIZE SECONDS</c>: one second of warm-up, prints "start", keeps <see cref="Window"/> requests in
    /// flight on each of <see cref="ClientSockets"/> sockets for SECONDS, prints "answers N". A window that gets no
    /// answer for 50 ms (the server or a socket buffer dropped datagrams) is sent again. The same for every server.
    /// </summary>
    public static void Load(int port, int size, int seconds)
    {
        LoadAsync(port, size, seconds).GetAwaiter().GetResult();
    }

    private static async Task LoadAsync(int port, int size, int seconds)
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        var server = new IPEndPoint(IPAddress.Loopback, port);
        long answers = 0;
        bool counting = false;
        using var stop = new CancellationTokenSource();
        Task[] senders = Enumerable.Range(0, ClientSockets).Select(i => Task.Run(async () =>
        {
            await using IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0), new IoUringUdpOptions { MaxDatagramSize = 2048, ReceiveBufferCount = 64 });
            socket.Connect(server);
            byte[] request = new byte[size];
            new Random(i).NextBytes(request);
            request[2] = 0x01; // a query
            var replies = new UdpDatagramBatch(Window, 2048);
            var timeout = new CancellationTokenSource();
            for (int w = 0; w < Window; w++)
            {
                await socket.SendAsync(request).ConfigureAwait(false);
            }
            while (!stop.IsCancellationRequested)
            {
                if (!timeout.TryReset())
                {
                    timeout.Dispose();
                    timeout = new CancellationTokenSource();
                }
                timeout.CancelAfter(50);
                int count;
                try
                {
                    count = await socket.ReceiveBatchAsync(replies, timeout.Token).ConfigureAwait(false);
                }
                catch (OperationCanceledException)
                {
                    count = Window; // lost: send the window again
                }
                if (Volatile.Read(ref counting))
                {
                    Interlocked.Add(ref answers, replies.Count);
                }
                for (int k = 0; k < count; k++)
                {
                    await socket.SendAsync(request).ConfigureAwait(false);
                }
            }
            timeout.Dispose();
        })).ToArray();
        await Task.Delay(TimeSpan.FromSeconds(1)).ConfigureAwait(false);
        Console.WriteLine("start");
        Volatile.Write(ref counting, true);
        await Task.Delay(TimeSpan.FromSeconds(seconds)).ConfigureAwait(false);
        Volatile.Write(ref counting, false);
        Console.WriteLine($"answers {Interlocked.Read(ref answers)}");
        await stop.CancelAsync().ConfigureAwait(false);
        await Task.WhenAll(senders).ConfigureAwait(false);
    }
}
