using System.Buffers;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A one-way bulk UDP stream measured on the <b>send side</b> in <b>bytes per sender CPU-second</b>: each sender runs
/// in its own process pinned to CPU 0 (taskset) and sends datagrams of one size flat out to a sink (below); the
/// sender's utime + stime over the window divides the bytes the kernel took. Senders: System.Net.Sockets
/// (<c>SendToAsync(ReadOnlyMemory, SocketFlags, SocketAddress)</c>, its best), IoUring one datagram per
/// <c>SendToAsync</c>, IoUring with segmentation offload (<c>SendSegmentsToAsync</c>: as many datagrams per send as fit
/// in 65,000 B, at most 64, copied into the send), the same from a buffer rented from <c>MemoryPool&lt;byte&gt;.Shared</c>
/// and handed over to the send (no copy: "iouring-gso-lent"; "iouring-gso-pool" from the loop's 64 KiB pinned blocks,
/// <c>EventLoop.LargeMemoryPool</c>), and the ceiling of this machine's kernel: benchmarks/c/udp_bulk with one sendto(2) per
/// datagram ("c-sendto") and with sendmsg(2) carrying UDP_SEGMENT, segmented as IoUring's ("c-gso"), skipped with a
/// line saying why when it cannot be built (it needs gcc). If c-gso's ratio to Sockets is below a goal, no .NET sender
/// can reach it on this machine. Windows alternate between the senders, round after round; ratios to Sockets are
/// medians of rounds.
/// <para>Sinks, the fourth argument. "loopback" (the default): a System.Net.Sockets receiver pinned to CPU 1 that only
/// drains. There the sender's CPU time includes the receive side's kernel work (the softirq that delivers each packet
/// into the receiving socket runs in the sender's context), a datagram dropped at the full receive queue costs the
/// sender less than one delivered (so a sender whose datagrams the receiver takes a smaller share of pays less per
/// byte, which flatters the segmented senders), and the kernel segments a UDP_SEGMENT send in software. "ifb-gso" and
/// "ifb-nogso" measure what the sender alone pays, as with a network card: the senders run inside a network namespace
/// of the run's own where the destination is routed to a device whose driver frees every packet (<see
/// cref="UdpBulkDevice"/>; no receiver, no "delivered"), which segments UDP in its features ("ifb-gso": a segmented
/// send reaches the driver as one packet, like a NIC with UDP segmentation offload) or not ("ifb-nogso": the kernel
/// segments before the driver, as for a NIC without it). Neither has a real driver's own work (DMA mapping,
/// descriptors, the completion that frees the packet) nor a queueing discipline. Under the table a line per sender
/// checks the driver over all its windows: its bytes must be exactly the sent bytes plus each packet's headers
/// ("agrees"; if not, the run says it is not valid and exits with 1), and its datagrams per packet show whether the
/// kernel segmented before it.</para>
/// <para>Each sender is one process for all the rounds of a size: the harness starts it, lets it send until it is past
/// the JIT's tiers (<see cref="UdpBulkHarness.WarmUp"/>), and keeps it paused between its windows, as <see
/// cref="UdpResponder"/> keeps its servers. The "jitted" column counts the methods compiled inside the windows (the
/// most of any round). Checked: with the default tiers a fresh sender went on compiling methods for several seconds
/// (batches a second or more apart, the single-CPU delay) and a window started after a fixed second of sending compiled
/// hundreds; after this warm-up the windows compiled none or one, as with every method fully optimized from its first
/// call (<c>DOTNET_TieredCompilation=0 DOTNET_ReadyToRun=0</c>, which the children take from the parent's environment:
/// the run to compare the rates with).</para>
/// <para>Beside the CPU: on loopback the share of the sent bytes the receiver got ("delivered": read the ratios with
/// it, see the sinks), the sender's peak RSS (VmHWM) and, for the .NET senders, the bytes
/// allocated inside the window and the GC heap at its end.</para>
/// <code>
/// dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --udp-bulk [rounds] [seconds] [sizes] [sink]
/// </code>
/// (defaults 7 rounds of 3 s, sizes 1200,1450, sink loopback; the ifb sinks need root, iproute2's ip and tc, and
/// ethtool for ifb-nogso).
/// </summary>
public static class UdpBulkSend
{
    private static readonly string[] Sinks = ["loopback", "ifb-gso", "ifb-nogso"];

    public static void Run(string[] args)
    {
        (int rounds, int seconds, int[] sizes) = UdpBulkHarness.ParseArguments(args, defaultRounds: 7);
        string sink = args.Length > 3 ? args[3] : "loopback";
        if (!Sinks.Contains(sink))
        {
            throw new ArgumentException($"sink '{sink}': one of {string.Join(", ", Sinks)}");
        }
        if (sink != "loopback" && sizes.Any(size => size > UdpBulkDevice.MaxDatagram))
        {
            throw new ArgumentException($"{sink}: datagrams of at most {UdpBulkDevice.MaxDatagram} B (the MTU)");
        }
        string[] senders = ["sockets", "iouring", "iouring-gso", "iouring-gso-lent", "iouring-gso-pool", "c-sendto",
            "c-gso"];
        string? cProgram = UdpBulkHarness.BuildCProgram(ref senders);
        using UdpBulkDevice? device = sink == "loopback" ? null : UdpBulkDevice.Create(sink == "ifb-gso");
        Console.WriteLine($"UDP bulk send: {rounds} rounds of {seconds} s per sender and size after each one's " +
            "warm-up; senders on CPU 0, " + (device is null
                ? "the receiver on CPU 1 (loopback)"
                : $"to {UdpBulkDevice.Device} (ifb) in network namespace {device.Namespace}, {device.Feature}"));
        UdpBulkHarness.PrintHeader("sender");
        foreach (int size in sizes)
        {
            using Child? receiver = device is null ? Child.Start(1, "--udp-drain") : null;
            string sizeArg = size.ToString(CultureInfo.InvariantCulture);
            string[] target = device is null
                ? [receiver!.ReadLine("port "), sizeArg]
                : [UdpBulkDevice.Port.ToString(CultureInfo.InvariantCulture), sizeArg,
                    UdpBulkDevice.Local.ToString(), UdpBulkDevice.Destination.ToString()];
            var started = new List<Child>();
            try
            {
                foreach (string kind in senders) // one at a time: each warms up alone, then waits paused
                {
                    Child sender = UdpBulkHarness.StartRow(kind, "--udp-blast", cProgram, "send", device?.Namespace,
                        target);
                    started.Add(sender);
                    UdpBulkHarness.WarmUp(receiver is null ? [sender] : [sender, receiver]);
                    sender.Count("pause");
                }
                var samples = senders.Select(_ => new List<BulkSample>()).ToArray();
                var tallies = senders.Select(_ => new UdpBulkDriverTally()).ToArray();
                for (int round = 0; round < rounds; round++)
                {
                    for (int s = 0; s < senders.Length; s++)
                    {
                        samples[s].Add(device is null
                            ? UdpBulkHarness.Window(started[s], started[s], size, seconds, receiver)
                            : tallies[s].Window(started[s], size, seconds));
                    }
                }
                UdpBulkHarness.PrintRows(size, senders, samples);
                if (device is not null)
                {
                    for (int s = 0; s < senders.Length; s++)
                    {
                        tallies[s].Print(size, senders[s]);
                    }
                }
            }
            finally
            {
                started.ForEach(sender => sender.Dispose());
            }
        }
        if (!UdpBulkDriverTally.AllAgreed)
        {
            Console.WriteLine("The driver's counts and the senders' bytes disagree: this run is not valid.");
            Environment.ExitCode = 1;
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

    /// <summary><c>--udp-blast KIND PORT SIZE [FROM TO]</c>: sends from FROM (an address of this host, 127.0.0.1 by
    /// default) to TO:PORT (127.0.0.1 by default) flat out (but between "pause" and "go"), answering stdin lines with
    /// its counters (<see cref="ChildCounters"/>: the bytes the kernel took) until its stdin ends.</summary>
    public static void Blast(string[] args)
    {
        string kind = args[0];
        int size = int.Parse(args[2], CultureInfo.InvariantCulture);
        var local = new IPEndPoint(args.Length > 4 ? IPAddress.Parse(args[3]) : IPAddress.Loopback, 0);
        SocketAddress to = new IPEndPoint(args.Length > 4 ? IPAddress.Parse(args[4]) : IPAddress.Loopback,
            int.Parse(args[1], CultureInfo.InvariantCulture)).Serialize();
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
            plain.Bind(local);
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
            udp = network.BindUdp(local);
            bool gso = kind == "iouring-gso";
            // iouring-gso-lent hands each send a buffer rented from MemoryPool<byte>.Shared (no copy), as an
            // application that builds its datagrams in rented memory does; the socket disposes it when sent.
            bool lent = kind == "iouring-gso-lent";
            // iouring-gso-pool hands over 64 KiB blocks of the loop's own pinned pool instead (no pinning per send).
            MemoryPool<byte>? pool = kind == "iouring-gso-pool" ? udp.Loop.LargeMemoryPool : null;
            loop = async () =>
            {
                ReadOnlyMemory<byte> datagram = payload.AsMemory(0, size);
                while (!stop.IsCancellationRequested)
                {
                    if (Volatile.Read(ref paused) is { } gate)
                    {
                        await gate.Task.ConfigureAwait(false);
                    }
                    bytes += lent || pool is not null
                        ? await udp.SendSegmentsToAsync((pool ?? MemoryPool<byte>.Shared).Rent(payload.Length),
                            payload.Length, size, to).ConfigureAwait(false)
                        : gso
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
