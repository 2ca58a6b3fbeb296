using System.Collections.Concurrent;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Runtime.CompilerServices;
using System.Runtime.Versioning;
using IoUring.Loops;
using IoUring.Net;

namespace IoUring.Diagnostics;

/// <summary>
/// The "IoUring" meter (docs/metrics.md lists every instrument): one per <see cref="IMeterFactory"/>, or one
/// process-wide without a factory, so each instrument exists once. Every <see cref="IoUringNetwork"/> registers its
/// loops with the one of its <see cref="IoUringNetworkOptions.MeterFactory"/>.
/// </summary>
/// <remarks>
/// One series per loop index (<see cref="LoopIdTag"/>), summed over the meter's networks. Observable instruments read
/// the loops' counters only when collected; the synchronous ones change once per connection, so nothing is added per
/// I/O.
/// </remarks>
internal sealed class IoUringMetrics
{
    public const string MeterName = "IoUring";

    private static readonly string? MeterVersion = typeof(IoUringNetwork).Assembly
        .GetCustomAttributes(typeof(System.Reflection.AssemblyInformationalVersionAttribute), inherit: false)
        .OfType<System.Reflection.AssemblyInformationalVersionAttribute>().FirstOrDefault()?.InformationalVersion;

    public const string LoopIdTag = "iouring.loop.id";

    public const string DirectionTag = "network.io.direction";

    public const string ZeroCopyBufferTag = "iouring.connection.zero_copy.buffer";

    private const bool Counts = true;   // a count: what gone networks did stays in it
    private const bool Levels = false;  // a level: gone networks hold nothing

    private static readonly ConditionalWeakTable<IMeterFactory, IoUringMetrics> s_byFactory = new();
    private static readonly Lazy<IoUringMetrics> s_global = new(() => new IoUringMetrics(null));

    private readonly Meter _meter;
    private readonly Counter<long> _opened;
    private readonly UpDownCounter<long> _active;
    // Keyed by object, not EventLoop: the meter exists on every OS, and a Linux-only key type would trip CA1416.
    private readonly ConcurrentDictionary<object, KeyValuePair<string, object?>> _loopTags = new();
    // guards the two below
    private readonly Lock _lock = new();
    private readonly List<IoUringNetwork> _networks = [];
    // by loop id: what disposed networks did, so counts never go back
    private EventLoopCounters[] _retired = [];

    private IoUringMetrics(IMeterFactory? meterFactory)
    {
        var options = new MeterOptions(MeterName) { Version = MeterVersion };
        _meter = meterFactory?.Create(options) ?? new Meter(options);
        _meter.CreateObservableCounter("iouring.loop.syscalls", PerLoop(Counts, static c => c.Syscalls), "{call}",
            "io_uring_enter calls the loop made.");
        _meter.CreateObservableCounter("iouring.loop.sqes", PerLoop(Counts, static c => c.Sqes), "{entry}",
            "Submission queue entries the loop wrote.");
        _meter.CreateObservableCounter("iouring.loop.cqes", PerLoop(Counts, static c => c.Cqes), "{entry}",
            "Completion queue entries the loop handled.");
        _meter.CreateObservableCounter("iouring.loop.cq_overflows", PerLoop(Counts, static c => c.CqOverflows),
            "{event}", "Times the kernel held completions back because the loop's completion queue was full.");
        _meter.CreateObservableCounter("iouring.loop.buffer_ring_exhaustions",
            PerLoop(Counts, static c => c.BufferRingExhaustions), "{event}",
            "Receives that found their provided buffer ring empty (ENOBUFS): the loop's, or a UDP socket's own.");
        _meter.CreateObservableCounter("iouring.loop.receive_buffers_lost",
            PerLoop(Counts, static c => c.ReceiveBuffersLost), "{buffer}",
            "Receive buffers the loop could not give back to its ring (expected 0).");
        _meter.CreateObservableCounter("iouring.loop.wakeups", PerLoop(Counts, static c => c.Wakeups), "{wakeup}",
            "Times another thread woke the loop from its wait (an eventfd write).");
        _meter.CreateObservableCounter("iouring.loop.handler_exceptions",
            PerLoop(Counts, static c => c.HandlerExceptions), "{exception}",
            "Exceptions a completion handler threw on the loop (its connection was aborted, the loop went on). " +
            "Expected to stay 0; anything else is a bug to report.");
        _meter.CreateObservableCounter("iouring.connection.io",
            PerLoop(Counts, ByDirection(static c => c.BytesReceived, static c => c.BytesSent)),
            "By", "Bytes the loop's connections (TCP, Unix domain sockets) received from and sent to their peers.");
        _meter.CreateObservableCounter("iouring.connection.zero_copy.sends", PerLoop(Counts,
            new(static c => c.ZeroCopySendsFixed, ZeroCopyBufferTag, "registered"),
            new(static c => c.ZeroCopySends - c.ZeroCopySendsFixed, ZeroCopyBufferTag, "pinned")),
            "{send}", "Zero-copy sends (SEND_ZC/SENDMSG_ZC) the loop's connections made.");
        _meter.CreateObservableCounter("iouring.connection.zero_copy.copied",
            PerLoop(Counts, static c => c.ZeroCopySendsCopied), "{send}",
            "Zero-copy sends the kernel reported it copied after all (loopback, or a device without zero-copy).");
        _meter.CreateObservableCounter("iouring.file.reads", PerLoop(Counts, static c => c.FileReads), "{read}",
            "File reads the loop made for SendFileAsync (static files, Results.File).");
        _meter.CreateObservableCounter("iouring.file.io", PerLoop(Counts, static c => c.FileBytesRead), "By",
            "Bytes the loop read from files for SendFileAsync.");
        _meter.CreateObservableCounter("iouring.udp.datagrams",
            PerLoop(Counts, ByDirection(static c => c.UdpDatagramsReceived, static c => c.UdpDatagramsSent)),
            "{datagram}", "UDP datagrams the loop's sockets received (dropped ones included) and sent.");
        _meter.CreateObservableCounter("iouring.udp.io",
            PerLoop(Counts, ByDirection(static c => c.UdpBytesReceived, static c => c.UdpBytesSent)),
            "By", "Payload bytes of the UDP datagrams the loop's sockets received and sent.");
        _meter.CreateObservableCounter("iouring.udp.dropped", PerLoop(Counts, static c => c.UdpDatagramsDropped),
            "{datagram}", "UDP datagrams dropped because their socket's receive queue was full.");
        _meter.CreateObservableCounter("iouring.udp.truncated", PerLoop(Counts, static c => c.UdpDatagramsTruncated),
            "{datagram}", "UDP datagrams handed to a receive cut: longer than its buffer or MaxDatagramSize.");
        _meter.CreateObservableCounter("iouring.udp.segment_offloads",
            PerLoop(Counts, static c => c.UdpSegmentOffloads), "{send}",
            "Segmented UDP sends the kernel took with UDP_SEGMENT (GSO): one SENDMSG for all their datagrams.");
        _meter.CreateObservableCounter("iouring.udp.coalesced_receives",
            PerLoop(Counts, static c => c.UdpCoalescedReceives), "{receive}",
            "UDP receives that held a coalesced burst (UDP_GRO), split back into its datagrams.");
        _meter.CreateObservableUpDownCounter("iouring.memory_pool.used",
            PerLoop(Levels, static c => c.MemoryPoolRentedBytes), "By",
            "Bytes of the loop's memory pool rented now, including blocks pinned by zero-copy sends until their " +
            "notification.");
        _meter.CreateObservableUpDownCounter("iouring.memory_pool.registered",
            PerLoop(Levels, static c => c.RegisteredMemoryBytes), "By",
            "Bytes of the loop's memory pool registered with its ring as fixed buffers.");
        _opened = _meter.CreateCounter<long>("iouring.connection.opened", "{connection}",
            "Connections accepted or connected on the loop.");
        _active = _meter.CreateUpDownCounter<long>("iouring.connection.active", "{connection}",
            "Connections open on the loop now.");
    }

    public static IoUringMetrics For(IMeterFactory? meterFactory)
        => meterFactory is null
            ? s_global.Value
            : s_byFactory.GetValue(meterFactory, static f => new IoUringMetrics(f));

    /// <summary>Called once, by the network's constructor (twice would count its loops twice).</summary>
    [SupportedOSPlatform("linux")]
    public void Register(IoUringNetwork network)
    {
        for (int id = 0; id < network.Loops.Count; id++)
        {
            _loopTags[network.Loops[id]] = new(LoopIdTag, id);
        }
        lock (_lock)
        {
            Debug.Assert(!_networks.Contains(network), "a network registered twice");
            _networks.Add(network);
        }
    }

    /// <summary>Keeps the counts of a network going away.</summary>
    [SupportedOSPlatform("linux")]
    public void Retire(IoUringNetwork network)
    {
        lock (_lock)
        {
            if (!_networks.Remove(network))
            {
                return;
            }
            AddLoops(ref _retired, network);
        }
        foreach (EventLoop loop in network.Loops)
        {
            _loopTags.TryRemove(loop, out _);
        }
    }

    /// <summary>Returns the tag to give <see cref="ConnectionClosed"/>, so both land in one series.</summary>
    public KeyValuePair<string, object?> ConnectionOpened(EventLoop loop)
    {
        if (!_loopTags.TryGetValue(loop, out KeyValuePair<string, object?> tag))
        {
            tag = new(LoopIdTag, 0); // a loop of no registered network
        }
        _opened.Add(1, tag);
        _active.Add(1, tag);
        return tag;
    }

    public void ConnectionClosed(KeyValuePair<string, object?> loopTag) => _active.Add(-1, loopTag);

    /// <summary>Loop i's counters summed over live networks, plus retired ones' for <see cref="Counts"/>.</summary>
    private EventLoopCounters[] CountersByLoop(bool counts)
    {
        lock (_lock)
        {
            EventLoopCounters[] byLoop = counts ? (EventLoopCounters[])_retired.Clone() : [];
            // For CA1416 (networks exist only on Linux); the JIT folds it away.
            if (OperatingSystem.IsLinux())
            {
                foreach (IoUringNetwork network in _networks)
                {
                    AddLoops(ref byLoop, network);
                }
            }
            return byLoop;
        }
    }

    [SupportedOSPlatform("linux")]
    private static void AddLoops(ref EventLoopCounters[] byLoop, IoUringNetwork network)
    {
        IReadOnlyList<EventLoop> loops = network.Loops;
        if (byLoop.Length < loops.Count)
        {
            Array.Resize(ref byLoop, loops.Count);
        }
        for (int id = 0; id < loops.Count; id++)
        {
            byLoop[id] += loops[id].Counters;
        }
    }

    private static Part[] ByDirection(Func<EventLoopCounters, long> received, Func<EventLoopCounters, long> sent)
        => [new(received, DirectionTag, "receive"), new(sent, DirectionTag, "transmit")];

    private Func<IEnumerable<Measurement<long>>> PerLoop(bool counts, Func<EventLoopCounters, long> select)
        => PerLoop(counts, new Part(select));

    /// <summary>For each loop id, one measurement per part, tagged with the loop id and the part's tag.</summary>
    private Func<IEnumerable<Measurement<long>>> PerLoop(bool counts, params Part[] parts) => () =>
    {
        EventLoopCounters[] byLoop = CountersByLoop(counts);
        var measurements = new List<Measurement<long>>(byLoop.Length * parts.Length);
        for (int id = 0; id < byLoop.Length; id++)
        {
            var loopTag = new KeyValuePair<string, object?>(LoopIdTag, id);
            foreach (Part part in parts)
            {
                long value = part.Select(byLoop[id]);
                measurements.Add(part.TagName is null
                    ? new(value, loopTag)
                    : new(value, loopTag, new(part.TagName, part.TagValue)));
            }
        }
        return measurements;
    };

    private readonly record struct Part(Func<EventLoopCounters, long> Select, string? TagName = null,
        string? TagValue = null);
}
