using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A one-way bulk UDP stream measured on the <b>receive side</b> in <b>bytes per receiver CPU-second</b>: the receiver
/// under test runs in its own process pinned to CPU 0; a segmented IoUring sender pinned to CPU 1 sends datagrams of one
/// size flat out (faster than any receiver takes them: the socket's queue stays full and the surplus is dropped by the
/// kernel, on the sender's CPU); the receiver's utime + stime over the window divides the bytes it received.
/// Receivers: System.Net.Sockets (<c>ReceiveFromAsync(Memory, SocketFlags, SocketAddress)</c>), IoUring
/// <c>ReceiveFromAsync</c>, IoUring <c>ReceiveBatchAsync</c>, and IoUring <c>ReceiveBatchAsync</c> with
/// <see cref="IoUringUdpOptions.ReceiveCoalesced"/> (GRO).
/// <code>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --udp-bulk-receive [rounds] [seconds] [sizes]</code>
/// (defaults 5 rounds of 3 s, sizes 1200,1450).
/// </summary>
public static class UdpBulkReceive
{
    private static readonly string[] Receivers = ["sockets", "iouring", "iouring-batch", "iouring-gro"];

    public static void Run(string[] args)
    {
        int Arg(int index, int fallback) => args.Length > index ? int.Parse(args[index], CultureInfo.InvariantCulture) : fallback;
        int rounds = Arg(0, 5), seconds = Arg(1, 3);
        int[] sizes = args.Length > 2 ? args[2].Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray() : [1200, 1450];
        Console.WriteLine($"UDP bulk receive: {rounds} rounds of {seconds} s per receiver and size; receivers on CPU 0, the sender on CPU 1");
        foreach (int size in sizes)
        {
            var perCpuSecond = Receivers.Select(_ => new List<double>()).ToArray();
            for (int round = -1; round < rounds; round++)
            {
                for (int r = 0; r < Receivers.Length; r++)
                {
                    using Child receiver = Child.Start(0, "--udp-sink", Receivers[r]);
                    string port = receiver.ReadLine("port ");
                    using Child sender = Child.Start(1, "--udp-blast", "iouring-gso", port,
                        size.ToString(CultureInfo.InvariantCulture), (seconds + 2).ToString(CultureInfo.InvariantCulture));
                    sender.ReadLine("start");
                    receiver.WriteLine("count");
                    long before = long.Parse(receiver.ReadLine("bytes "), CultureInfo.InvariantCulture);
                    TimeSpan cpuBefore = receiver.CpuTime();
                    Thread.Sleep(TimeSpan.FromSeconds(seconds));
                    receiver.WriteLine("count");
                    long after = long.Parse(receiver.ReadLine("bytes "), CultureInfo.InvariantCulture);
                    TimeSpan cpu = receiver.CpuTime() - cpuBefore;
                    if (round >= 0)
                    {
                        perCpuSecond[r].Add((after - before) / cpu.TotalSeconds);
                    }
                    sender.ReadLine("bytes ");
                }
            }
            for (int r = 0; r < Receivers.Length; r++)
            {
                double[] ratios = perCpuSecond[r].Zip(perCpuSecond[0], (a, b) => a / b).ToArray();
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"{size,5} B  {Receivers[r],-14} {UdpResponder.Median(perCpuSecond[r]) / 1e6,8:F1} MB/CPU-s  ratio " +
                    $"{UdpResponder.Median(ratios):F2} (min {ratios.Min():F2}, max {ratios.Max():F2})"));
            }
        }
    }

    /// <summary><c>--udp-sink KIND</c>: prints "port N", receives and counts bytes; answers each stdin line with
    /// "bytes N" (so far); ends with its stdin.</summary>
    public static void Sink(string kind)
    {
        long bytes = 0;
        using var stop = new CancellationTokenSource();
        Task receiving;
        if (kind == "sockets")
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
            socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            Console.WriteLine($"port {((IPEndPoint)socket.LocalEndPoint!).Port}");
            receiving = Task.Run(async () =>
            {
                var buffer = new byte[2048];
                var from = new SocketAddress(AddressFamily.InterNetwork);
                while (!stop.IsCancellationRequested)
                {
                    int n = await socket.ReceiveFromAsync(buffer, SocketFlags.None, from).ConfigureAwait(false);
                    Interlocked.Add(ref bytes, n);
                }
            });
        }
        else
        {
            var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
            IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0), new IoUringUdpOptions
            {
                MaxDatagramSize = 2048,
                ReceiveBufferCount = 64,
                ReceiveCoalesced = kind == "iouring-gro",
            });
            Console.WriteLine($"port {((IPEndPoint)socket.LocalEndPoint).Port}");
            receiving = Task.Run(async () =>
            {
                var buffer = new byte[2048];
                var from = new SocketAddress(AddressFamily.InterNetwork);
                var batch = new UdpDatagramBatch(64, 2048);
                while (!stop.IsCancellationRequested)
                {
                    if (kind == "iouring")
                    {
                        DatagramResult received = await socket.ReceiveFromAsync(buffer, from).ConfigureAwait(false);
                        Interlocked.Add(ref bytes, received.BytesReceived);
                        continue;
                    }
                    int count = await socket.ReceiveBatchAsync(batch).ConfigureAwait(false);
                    long sum = 0;
                    for (int i = 0; i < count; i++)
                    {
                        sum += batch.GetResult(i).BytesReceived;
                    }
                    Interlocked.Add(ref bytes, sum);
                }
            });
        }
        while (Console.In.ReadLine() is not null)
        {
            Console.WriteLine($"bytes {Interlocked.Read(ref bytes)}");
        }
        Environment.Exit(0); // the receive loop blocks in a receive: the process just ends
    }
}
