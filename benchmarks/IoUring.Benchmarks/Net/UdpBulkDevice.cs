using System.Globalization;
using System.Net;
using System.Runtime.InteropServices;

namespace IoUring.Benchmarks.Net;

/// <summary>What a device's driver was handed: packets (one per skb, however many datagrams it carries) and their
/// bytes, each packet's Ethernet, IPv4 and UDP headers included.</summary>
internal readonly record struct DeviceCounters(long Bytes, long Packets)
{
    public static DeviceCounters operator -(DeviceCounters a, DeviceCounters b)
        => new(a.Bytes - b.Bytes, a.Packets - b.Packets);
}

/// <summary>
/// The device sinks of <see cref="UdpBulkSend"/>: a network namespace of the run's own in which <see
/// cref="Destination"/> is routed to an ifb device <see cref="Device"/>, whose driver counts every packet it is handed
/// and frees it; no receiver, no delivery. With <c>segmentationOffload</c> the device keeps the UDP segmentation
/// feature it is created with (tx-udp-segmentation, in its software GSO features), so a UDP_SEGMENT send reaches the
/// driver as one packet, as on a NIC that segments in hardware; without it (<c>ethtool -K ... tx-udp-segmentation
/// off</c>) the kernel segments in software before the driver, as for a NIC that cannot. The driver's counters tell
/// which happened (<see cref="Read"/>).
/// </summary>
/// <remarks>
/// ifb rather than dummy: this machine's kernel is built without the dummy driver (CONFIG_DUMMY), and ifb's transmit
/// does what dummy's does for a packet no tc rule redirected to it (counts it, frees it: its counters call this "rx",
/// its "tx" ones count the redirected packets it passes on); it is NOARP (no neighbour resolution: the driver gets
/// every packet) and its UDP segmentation can be turned off. Its default queueing discipline is replaced with noqueue,
/// dummy's, so that a send goes straight to the driver (which, unlike dummy's, takes its queue's transmit lock: one
/// uncontended lock a packet); IPv6 is off on it, so that the kernel sends nothing of its own (router solicitations)
/// there. The MTU stays Ethernet's 1,500 B.
/// </remarks>
internal sealed class UdpBulkDevice : IDisposable
{
    public const string Device = "sink0";
    public const int Port = 9; // discard: no one listens anyway
    public const int HeaderBytes = 14 + 20 + 8; // Ethernet, IPv4 and UDP: what each packet the driver counts adds
    public const int Mtu = 1500;
    public const int MaxDatagram = Mtu - 20 - 8; // larger ones leave in IP fragments, and UDP_SEGMENT refuses them
    public static readonly IPAddress Local = IPAddress.Parse("10.79.0.1");
    public static readonly IPAddress Destination = IPAddress.Parse("10.79.0.2");
    private const string Prefix = "iouring-udpbulk-"; // + this process's id: unique while it runs

    private int _deleted;
    private PosixSignalRegistration[] _signals = [];

    private UdpBulkDevice(string name) => Namespace = name;

    /// <summary>The namespace's name (in /run/netns).</summary>
    public string Namespace { get; }

    /// <summary>The device's UDP segmentation as ethtool states it, or why it is not shown.</summary>
    public string Feature { get; private set; } = "";

    /// <summary>Makes the namespace and its device (see the class), deleting it again if a step fails, and
    /// whenever this process ends before <see cref="Dispose"/> (on an unhandled exception, Ctrl-C, SIGTERM or SIGHUP;
    /// not SIGKILL: the next run deletes namespaces left by runs that are gone).</summary>
    public static UdpBulkDevice Create(bool segmentationOffload)
    {
        DeleteOrphans();
        var sink = new UdpBulkDevice(Prefix + Environment.ProcessId.ToString(CultureInfo.InvariantCulture));
        // The runtime's own default for these signals ends the process without ProcessExit.
        sink._signals = [.. new[] { PosixSignal.SIGINT, PosixSignal.SIGTERM, PosixSignal.SIGHUP }
            .Select(signal => PosixSignalRegistration.Create(signal, _ => sink.Dispose()))];
        AppDomain.CurrentDomain.ProcessExit += sink.OnExit;
        AppDomain.CurrentDomain.UnhandledException += sink.OnExit;
        string ns = sink.Namespace;
        try
        {
            NetworkNamespace.Run("ip", $"netns add {ns}");
            NetworkNamespace.Run("ip", $"-n {ns} link add {Device} type ifb");
            NetworkNamespace.Run("ip", $"netns exec {ns} sysctl -qw net.ipv6.conf.{Device}.disable_ipv6=1");
            NetworkNamespace.Run("ip", $"-n {ns} link set {Device} mtu {Mtu} up");
            NetworkNamespace.Run("tc", $"-n {ns} qdisc replace dev {Device} root noqueue");
            NetworkNamespace.Run("ip", $"-n {ns} addr add {Local}/24 dev {Device}");
            if (!segmentationOffload)
            {
                Ethtool(ns, $"-K {Device} tx-udp-segmentation off");
            }
        }
        catch
        {
            sink.Dispose();
            throw;
        }
        sink.Feature = ShowFeature(ns);
        return sink;
    }

    /// <summary>
    /// The driver's counters of <see cref="Device"/> as the namespace of <paramref name="inside"/> (a child in it)
    /// shows them in /proc/PID/net/dev: ifb's "receive" columns, which count the packets handed to its transmit.
    /// </summary>
    public static DeviceCounters Read(Child inside)
    {
        foreach (string line in File.ReadLines($"/proc/{inside.Id}/net/dev"))
        {
            string[] fields = line.Split([' ', ':'], StringSplitOptions.RemoveEmptyEntries);
            if (fields.Length > 2 && fields[0] == Device)
            {
                return new DeviceCounters(long.Parse(fields[1], CultureInfo.InvariantCulture),
                    long.Parse(fields[2], CultureInfo.InvariantCulture));
            }
        }
        throw new InvalidOperationException($"no {Device} in /proc/{inside.Id}/net/dev: is the child in the netns?");
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _deleted, 1) == 0)
        {
            // Children still in it keep the namespace itself until they end; its name goes now.
            NetworkNamespace.Delete(Namespace);
        }
        AppDomain.CurrentDomain.ProcessExit -= OnExit;
        AppDomain.CurrentDomain.UnhandledException -= OnExit;
        Array.ForEach(_signals, registration => registration.Dispose());
    }

    private void OnExit(object? sender, EventArgs e) => Dispose();

    private static string Ethtool(string ns, string arguments)
    {
        try
        {
            return NetworkNamespace.Run("ip", $"netns exec {ns} ethtool {arguments}");
        }
        catch (InvalidOperationException ex)
        {
            throw new InvalidOperationException($"{ex.Message} (needs ethtool: apt-get install ethtool)", ex);
        }
    }

    private static string ShowFeature(string ns)
    {
        try
        {
            return Ethtool(ns, $"-k {Device}").Split('\n')
                .FirstOrDefault(line => line.StartsWith("tx-udp-segmentation:", StringComparison.Ordinal))?.Trim()
                ?? "tx-udp-segmentation not listed by ethtool";
        }
        catch (InvalidOperationException)
        {
            // Only with the device as made (turning the feature off needed ethtool): its driver's counters still tell.
            return "ethtool not installed: feature not shown";
        }
    }

    private static void DeleteOrphans()
    {
        if (!Directory.Exists("/run/netns"))
        {
            return;
        }
        foreach (string path in Directory.GetFiles("/run/netns", Prefix + "*"))
        {
            string name = Path.GetFileName(path);
            if (int.TryParse(name[Prefix.Length..], CultureInfo.InvariantCulture, out int pid)
                && !Directory.Exists($"/proc/{pid}"))
            {
                NetworkNamespace.Delete(name);
            }
        }
    }
}
