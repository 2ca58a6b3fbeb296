using System.Globalization;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A one-way bulk UDP stream measured on the <b>receive side</b> in <b>bytes per receiver CPU-second</b>: the receiver
/// under test runs in its own process pinned to CPU 0; a segmented IoUring sender pinned to CPU 1 sends datagrams of
/// one size flat out (faster than any receiver takes them: the socket's queue stays full and the surplus is dropped by
/// the kernel, on the sender's CPU; the "CPU" column near 100% shows the receiver was the one short of time); the
/// receiver's utime + stime over the window divides the bytes it received. Receivers: System.Net.Sockets
/// (<c>ReceiveFromAsync(Memory, SocketFlags, SocketAddress)</c>), IoUring <c>ReceiveFromAsync</c>, IoUring
/// <c>ReceiveBatchAsync</c>, IoUring <c>ReceiveBatchAsync</c> with <see cref="IoUringUdpOptions.ReceiveCoalesced"/>
/// (GRO), and the ceiling of this machine's kernel: benchmarks/c/udp_bulk with recvmmsg(2) of 64 x 2,048 B
/// ("c-recvmmsg") and with UDP_GRO and recvmsg(2) of 64 KiB ("c-gro"), skipped with a line saying why when it cannot be
/// built. Each receiver is one process for all the rounds of a size, with a sender of its own that is paused but in the
/// receiver's windows; both are warmed past the JIT's tiers first, as in <see cref="UdpBulkSend"/>, whose notes on the
/// "jitted" column and the memory columns hold here too.
/// <code>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --udp-bulk-receive [rounds] [seconds] [sizes]</code>
/// (defaults 5 rounds of 3 s, sizes 1200,1450).
/// </summary>
public static class UdpBulkReceive
{
    public static void Run(string[] args)
    {
        (int rounds, int seconds, int[] sizes) = UdpBulkHarness.ParseArguments(args, defaultRounds: 5);
        string[] receivers = ["sockets", "iouring", "iouring-batch", "iouring-gro", "c-recvmmsg", "c-gro"];
        string? cProgram = UdpBulkHarness.BuildCProgram(ref receivers);
        Console.WriteLine($"UDP bulk receive: {rounds} rounds of {seconds} s per receiver and size after each one's " +
            "warm-up; receivers on CPU 0, the sender on CPU 1");
        UdpBulkHarness.PrintHeader("receiver");
        foreach (int size in sizes)
        {
            // A sender of its own for each receiver, paused but in the receiver's windows.
            var pairs = new List<(Child Receiver, Child Sender)>();
            try
            {
                foreach (string kind in receivers)
                {
                    Child receiver = UdpBulkHarness.StartRow(kind, "--udp-sink", cProgram, "recv", null);
                    string port = receiver.ReadLine("port ");
                    Child sender = Child.Start(1, "--udp-blast", "iouring-gso", port,
                        size.ToString(CultureInfo.InvariantCulture));
                    pairs.Add((receiver, sender));
                    UdpBulkHarness.WarmUp(receiver, sender);
                    sender.Count("pause");
                }
                var samples = receivers.Select(_ => new List<BulkSample>()).ToArray();
                for (int round = 0; round < rounds; round++)
                {
                    for (int r = 0; r < receivers.Length; r++)
                    {
                        samples[r].Add(UdpBulkHarness.Window(pairs[r].Sender, pairs[r].Receiver, size, seconds));
                    }
                }
                UdpBulkHarness.PrintRows(size, receivers, samples);
            }
            finally
            {
                pairs.ForEach(pair =>
                {
                    pair.Sender.Dispose();
                    pair.Receiver.Dispose();
                });
            }
        }
    }

    /// <summary><c>--udp-sink KIND</c>: prints "port N", receives and counts bytes, answering stdin lines with its
    /// counters (<see cref="ChildCounters"/>) until its stdin ends.</summary>
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
        ChildCounters.AnswerUntilStdinEnds(() => Interlocked.Read(ref bytes));
        Environment.Exit(0); // the receive loop blocks in a receive: the process just ends
    }
}
