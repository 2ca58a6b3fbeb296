using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A one-way bulk UDP stream measured on the <b>send side</b> in <b>bytes per sender CPU-second</b>: each sender runs in
/// its own process pinned to CPU 0 (taskset) and sends datagrams of one size flat out for a window to a
/// System.Net.Sockets receiver pinned to CPU 1 that only drains; the sender's utime + stime over the window (which on
/// loopback includes the kernel's delivery to the receiving socket) divides the bytes the kernel took. Senders:
/// System.Net.Sockets (<c>SendToAsync(ReadOnlyMemory, SocketFlags, SocketAddress)</c>, its best), IoUring one datagram per
/// <c>SendToAsync</c>, and IoUring with segmentation offload (<c>SendSegmentsToAsync</c>: as many datagrams per send as
/// fit in 64 KiB, at most 64). Windows alternate between the senders, round after round; ratios are medians of rounds.
/// <code>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --udp-bulk [rounds] [seconds] [sizes]</code>
/// (defaults 7 rounds of 3 s, sizes 1200,1450).
/// </summary>
public static class UdpBulkSend
{
    private static readonly string[] Senders = ["sockets", "iouring", "iouring-gso"];

    public static void Run(string[] args)
    {
        int Arg(int index, int fallback) => args.Length > index ? int.Parse(args[index], CultureInfo.InvariantCulture) : fallback;
        int rounds = Arg(0, 7), seconds = Arg(1, 3);
        int[] sizes = args.Length > 2 ? args[2].Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray() : [1200, 1450];
        Console.WriteLine($"UDP bulk send: {rounds} rounds of {seconds} s per sender and size; senders on CPU 0, the receiver on CPU 1");
        foreach (int size in sizes)
        {
            using Child receiver = Child.Start(1, "--udp-drain");
            int port = int.Parse(receiver.ReadLine("port "), CultureInfo.InvariantCulture);
            var perCpuSecond = Senders.Select(_ => new List<double>()).ToArray();
            var perSecond = Senders.Select(_ => new List<double>()).ToArray();
            for (int round = -1; round < rounds; round++) // round -1 warms up (a fresh process each window: JIT included)
            {
                for (int s = 0; s < Senders.Length; s++)
                {
                    using Child sender = Child.Start(0, "--udp-blast", Senders[s], port.ToString(CultureInfo.InvariantCulture),
                        size.ToString(CultureInfo.InvariantCulture), seconds.ToString(CultureInfo.InvariantCulture));
                    sender.ReadLine("start");
                    TimeSpan cpuBefore = sender.CpuTime();
                    long startTicks = Stopwatch.GetTimestamp();
                    long bytes = long.Parse(sender.ReadLine("bytes "), CultureInfo.InvariantCulture);
                    TimeSpan wall = Stopwatch.GetElapsedTime(startTicks);
                    TimeSpan cpu = sender.CpuTime() - cpuBefore;
                    if (round >= 0)
                    {
                        perCpuSecond[s].Add(bytes / cpu.TotalSeconds);
                        perSecond[s].Add(bytes / wall.TotalSeconds / size);
                    }
                }
            }
            for (int s = 0; s < Senders.Length; s++)
            {
                double[] ratios = perCpuSecond[s].Zip(perCpuSecond[0], (a, b) => a / b).ToArray();
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"{size,5} B  {Senders[s],-12} {UdpResponder.Median(perCpuSecond[s]) / 1e6,8:F1} MB/CPU-s  ratio {UdpResponder.Median(ratios):F2} " +
                    $"(min {ratios.Min():F2}, max {ratios.Max():F2})  {UdpResponder.Median(perSecond[s]),10:N0} datagrams/s"));
            }
        }
    }

    /// <summary><c>--udp-drain</c>: prints "port N", receives and drops everything until its stdin closes.</summary>
    public static void Drain()
    {
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp)
        {
            ReceiveBufferSize = 8 * 1024 * 1024,
        };
        socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        Console.WriteLine($"port {((IPEndPoint)socket.LocalEndPoint!).Port}");
        var draining = new Thread(() =>
        {
            var buffer = new byte[65536];
            try
            {
                while (true)
                {
                    socket.Receive(buffer);
                }
            }
            catch (SocketException)
            {
            }
            catch (ObjectDisposedException)
            {
            }
        }) { IsBackground = true };
        draining.Start();
        _ = Console.In.ReadToEnd();
    }

    /// <summary><c>--udp-blast KIND PORT SIZE SECONDS</c>: one second of warm-up, prints "start", sends for SECONDS,
    /// prints "bytes N" (what the kernel took).</summary>
    public static void Blast(string kind, int port, int size, int seconds)
        => BlastAsync(kind, port, size, seconds).GetAwaiter().GetResult();

    private static async Task BlastAsync(string kind, int port, int size, int seconds)
    {
        SocketAddress to = new IPEndPoint(IPAddress.Loopback, port).Serialize();
        int segments = Math.Min(IoUringUdpSocket.MaxSegments, 65_000 / size);
        byte[] payload = new byte[size * segments];
        new Random(size).NextBytes(payload);
        long bytes = 0;
        bool counting = false;
        var stop = new CancellationTokenSource();
        Func<Task> loop;
        Socket? plain = null;
        IoUringNetwork? network = null;
        IoUringUdpSocket? udp = null;
        if (kind == "sockets")
        {
            plain = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
            plain.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            loop = async () =>
            {
                ReadOnlyMemory<byte> datagram = payload.AsMemory(0, size);
                while (!stop.IsCancellationRequested)
                {
                    int sent = await plain.SendToAsync(datagram, SocketFlags.None, to).ConfigureAwait(false);
                    if (Volatile.Read(ref counting))
                    {
                        bytes += sent;
                    }
                }
            };
        }
        else
        {
            network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
            udp = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
            bool gso = kind == "iouring-gso";
            loop = async () =>
            {
                ReadOnlyMemory<byte> datagram = payload.AsMemory(0, size);
                while (!stop.IsCancellationRequested)
                {
                    int sent = gso
                        ? await udp.SendSegmentsToAsync(payload, size, to).ConfigureAwait(false)
                        : await udp.SendToAsync(datagram, to).ConfigureAwait(false);
                    if (Volatile.Read(ref counting))
                    {
                        bytes += sent;
                    }
                }
            };
        }
        Task running = Task.Run(loop);
        await Task.Delay(TimeSpan.FromSeconds(1)).ConfigureAwait(false);
        Console.WriteLine("start");
        Volatile.Write(ref counting, true);
        await Task.Delay(TimeSpan.FromSeconds(seconds)).ConfigureAwait(false);
        Volatile.Write(ref counting, false);
        long counted = Volatile.Read(ref bytes);
        Console.WriteLine($"bytes {counted}");
        await stop.CancelAsync().ConfigureAwait(false);
        await running.ConfigureAwait(false);
        plain?.Dispose();
        if (udp is not null)
        {
            await udp.DisposeAsync().ConfigureAwait(false);
        }
        if (network is not null)
        {
            await network.DisposeAsync().ConfigureAwait(false);
        }
        stop.Dispose();
    }
}
