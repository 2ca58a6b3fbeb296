using System.Globalization;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A one-way bulk UDP stream measured on the <b>send side</b> in <b>bytes per sender CPU-second</b>: each sender runs
/// in its own process pinned to CPU 0 (taskset) and sends datagrams of one size flat out to a System.Net.Sockets
/// receiver pinned to CPU 1 that only drains; the sender's utime + stime over the window (which on loopback includes
/// the kernel's delivery to the receiving socket) divides the bytes the kernel took. Senders: System.Net.Sockets
/// (<c>SendToAsync(ReadOnlyMemory, SocketFlags, SocketAddress)</c>, its best), IoUring one datagram per
/// <c>SendToAsync</c>, IoUring with segmentation offload (<c>SendSegmentsToAsync</c>: as many datagrams per send as fit
/// in 65,000 B, at most 64), and the ceiling of this machine's kernel: benchmarks/c/udp_bulk with one sendto(2) per
/// datagram ("c-sendto") and with sendmsg(2) carrying UDP_SEGMENT, segmented as IoUring's ("c-gso"), skipped with a
/// line saying why when it cannot be built (it needs gcc). If c-gso's ratio to Sockets is below a goal, no .NET sender
/// can reach it on this machine. Windows alternate between the senders, round after round; ratios to Sockets are
/// medians of rounds.
/// <para>Each sender is one process for all the rounds of a size: the harness starts it, lets it send until it is past
/// the JIT's tiers (<see cref="UdpBulkHarness.WarmUp"/>), and keeps it paused between its windows, as <see
/// cref="UdpResponder"/> keeps its servers. The "jitted" column counts the methods compiled inside the windows (the
/// most of any round). Checked: with the default tiers a fresh sender went on compiling methods for several seconds
/// (batches a second or more apart, the single-CPU delay) and a window started after a fixed second of sending compiled
/// hundreds; after this warm-up the windows compiled none or one, as with every method fully optimized from its first
/// call (<c>DOTNET_TieredCompilation=0 DOTNET_ReadyToRun=0</c>, which the children take from the parent's environment:
/// the run to compare the rates with).</para>
/// <para>Beside the CPU: the share of the sent bytes the receiver got ("delivered": on loopback a datagram that the
/// full receive queue drops costs the sender less than one delivered, so a sender the receiver cannot keep up with pays
/// less per byte; read the ratios with it), the sender's peak RSS (VmHWM) and, for the .NET senders, the bytes
/// allocated inside the window and the GC heap at its end.</para>
/// <code>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --udp-bulk [rounds] [seconds] [sizes]</code>
/// (defaults 7 rounds of 3 s, sizes 1200,1450).
/// </summary>
public static class UdpBulkSend
{
    public static void Run(string[] args)
    {
        (int rounds, int seconds, int[] sizes) = UdpBulkHarness.ParseArguments(args, defaultRounds: 7);
        string[] senders = ["sockets", "iouring", "iouring-gso", "c-sendto", "c-gso"];
        string? cProgram = UdpBulkHarness.BuildCProgram(ref senders);
        Console.WriteLine($"UDP bulk send: {rounds} rounds of {seconds} s per sender and size after each one's " +
            "warm-up; senders on CPU 0, the receiver on CPU 1");
        UdpBulkHarness.PrintHeader("sender");
        foreach (int size in sizes)
        {
            using Child receiver = Child.Start(1, "--udp-drain");
            string port = receiver.ReadLine("port ");
            var started = new List<Child>();
            try
            {
                foreach (string kind in senders) // one at a time: each warms up alone, then waits paused
                {
                    Child sender = UdpBulkHarness.StartRow(kind, "--udp-blast", cProgram, "send", port,
                        size.ToString(CultureInfo.InvariantCulture));
                    started.Add(sender);
                    UdpBulkHarness.WarmUp(sender, receiver);
                    sender.Count("pause");
                }
                var samples = senders.Select(_ => new List<BulkSample>()).ToArray();
                for (int round = 0; round < rounds; round++)
                {
                    for (int s = 0; s < senders.Length; s++)
                    {
                        samples[s].Add(UdpBulkHarness.Window(started[s], started[s], size, seconds, receiver));
                    }
                }
                UdpBulkHarness.PrintRows(size, senders, samples);
            }
            finally
            {
                started.ForEach(sender => sender.Dispose());
            }
        }
    }

    /// <summary><c>--udp-drain</c>: prints "port N", receives and drops everything, answering stdin lines with its
    /// counters (<see cref="ChildCounters"/>) until its stdin ends.</summary>
    public static void Drain()
    {
        using var socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp)
        {
            ReceiveBufferSize = 8 * 1024 * 1024,
        };
        socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        Console.WriteLine($"port {((IPEndPoint)socket.LocalEndPoint!).Port}");
        long received = 0; // written by the draining thread only
        var draining = new Thread(() =>
        {
            var buffer = new byte[65536];
            try
            {
                while (true)
                {
                    received += socket.Receive(buffer);
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
        ChildCounters.AnswerUntilStdinEnds(() => Volatile.Read(ref received));
    }

    /// <summary><c>--udp-blast KIND PORT SIZE</c>: sends to 127.0.0.1:PORT flat out (but between "pause" and "go"),
    /// answering stdin lines with its counters (<see cref="ChildCounters"/>: the bytes the kernel took) until its
    /// stdin ends.</summary>
    public static void Blast(string kind, int port, int size)
    {
        SocketAddress to = new IPEndPoint(IPAddress.Loopback, port).Serialize();
        int segments = Math.Min(IoUringUdpSocket.MaxSegments, 65_000 / size);
        byte[] payload = new byte[size * segments];
        new Random(size).NextBytes(payload);
        long bytes = 0; // written by the sending loop only
        TaskCompletionSource? paused = null; // while paused: what the sending loop awaits
        using var stop = new CancellationTokenSource();
        using Socket? plain = kind == "sockets"
            ? new(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp)
            : null;
        IoUringNetwork? network = null;
        IoUringUdpSocket? udp = null;
        Func<Task> loop;
        if (plain is not null)
        {
            plain.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            loop = async () =>
            {
                ReadOnlyMemory<byte> datagram = payload.AsMemory(0, size);
                while (!stop.IsCancellationRequested)
                {
                    if (Volatile.Read(ref paused) is { } gate)
                    {
                        await gate.Task.ConfigureAwait(false);
                    }
                    bytes += await plain.SendToAsync(datagram, SocketFlags.None, to).ConfigureAwait(false);
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
                    if (Volatile.Read(ref paused) is { } gate)
                    {
                        await gate.Task.ConfigureAwait(false);
                    }
                    bytes += gso
                        ? await udp.SendSegmentsToAsync(payload, size, to).ConfigureAwait(false)
                        : await udp.SendToAsync(datagram, to).ConfigureAwait(false);
                }
            };
        }
        Task running = Task.Run(loop);
        void Pause(bool pause)
        {
            if (pause)
            {
                var gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
                Volatile.Write(ref paused, gate);
            }
            else
            {
                Interlocked.Exchange(ref paused, null)?.SetResult();
            }
        }
        ChildCounters.AnswerUntilStdinEnds(() => Volatile.Read(ref bytes), Pause);
        stop.Cancel();
        Pause(false);
        running.GetAwaiter().GetResult();
        udp?.DisposeAsync().AsTask().GetAwaiter().GetResult();
        network?.DisposeAsync().AsTask().GetAwaiter().GetResult();
    }
}
