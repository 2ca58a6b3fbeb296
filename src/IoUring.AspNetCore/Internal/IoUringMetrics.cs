using System.Collections.Concurrent;
using System.Diagnostics.Metrics;
using System.Runtime.CompilerServices;
using IoUring.Net;
using IoUring.Loops;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// The "IoUring" meter: what the event loops did (io_uring_enter calls, SQEs, CQEs, CQ overflows, buffer-ring
/// exhaustions, read from each loop's counters when observed) and the connections and bytes of the transport (bytes counted by the loops too).
/// One per <see cref="IMeterFactory"/> (so per service provider), shared by every factory of the transport, so each
/// instrument exists once; every network registers its loops here.
/// </summary>
internal sealed class IoUringMetrics
{
    public const string MeterName = "IoUring";

    private static readonly ConditionalWeakTable<IMeterFactory, IoUringMetrics> s_byFactory = new();
    private static readonly Lazy<IoUringMetrics> s_global = new(() => new IoUringMetrics(null));

    private readonly Meter _meter;
    private readonly ConcurrentDictionary<IoUringNetwork, byte> _networks = new();
    private readonly Counter<long> _opened;
    private readonly UpDownCounter<long> _active;
    private readonly object _retiredLock = new();
    private EventLoopCounters _retired;     // counters of networks already disposed, so the totals never go back

    private IoUringMetrics(IMeterFactory? meterFactory)
    {
        _meter = meterFactory?.Create(MeterName) ?? new Meter(MeterName);
        _meter.CreateObservableCounter("iouring.loop.syscalls", () => Sum(static c => c.Syscalls), "{call}", "io_uring_enter calls made by the event loops.");
        _meter.CreateObservableCounter("iouring.loop.sqes", () => Sum(static c => c.Sqes), "{entry}", "Submission queue entries written.");
        _meter.CreateObservableCounter("iouring.loop.cqes", () => Sum(static c => c.Cqes), "{entry}", "Completion queue entries handled.");
        _meter.CreateObservableCounter("iouring.loop.cq_overflows", () => Sum(static c => c.CqOverflows), "{event}", "Times the kernel held completions back because the completion queue was full.");
        _meter.CreateObservableCounter("iouring.loop.buffer_ring_exhaustions", () => Sum(static c => c.BufferRingExhaustions), "{event}", "Receives that found the provided buffer ring empty (ENOBUFS).");
        _meter.CreateObservableCounter("iouring.loop.receive_buffers_lost", () => Sum(static c => c.ReceiveBuffersLost), "{buffer}", "Receive buffers that could not be given back to the ring (expected 0).");
        _meter.CreateObservableCounter("iouring.connection.bytes_received", () => Sum(static c => c.BytesReceived), "By", "Bytes received from peers.");
        _meter.CreateObservableCounter("iouring.connection.bytes_sent", () => Sum(static c => c.BytesSent), "By", "Bytes sent to peers.");
        _meter.CreateObservableCounter("iouring.connection.zero_copy_sends", () => Sum(static c => c.ZeroCopySends), "{send}", "Zero-copy sends (SEND_ZC/SENDMSG_ZC).");
        _meter.CreateObservableCounter("iouring.connection.zero_copy_sends_fixed", () => Sum(static c => c.ZeroCopySendsFixed), "{send}", "Zero-copy sends from registered (fixed) buffers.");
        _meter.CreateObservableCounter("iouring.connection.zero_copy_sends_copied", () => Sum(static c => c.ZeroCopySendsCopied), "{send}", "Zero-copy sends the kernel reported it copied after all (loopback, or a device without zero-copy).");
        _meter.CreateObservableUpDownCounter("iouring.memory_pool.rented", () => SumLive(static c => c.MemoryPoolRentedBytes), "By", "Bytes of the loops' memory pools rented now, including blocks pinned by zero-copy sends until their notification.");
        _meter.CreateObservableUpDownCounter("iouring.memory_pool.registered", () => SumLive(static c => c.RegisteredMemoryBytes), "By", "Bytes of the loops' memory pools registered with their rings as fixed buffers.");
        _opened = _meter.CreateCounter<long>("iouring.connection.opened", "{connection}", "Connections accepted or connected.");
        _active = _meter.CreateUpDownCounter<long>("iouring.connection.active", "{connection}", "Connections open now.");
    }

    /// <summary>The metrics published through <paramref name="meterFactory"/>, or through a process-wide meter without one.</summary>
    public static IoUringMetrics For(IMeterFactory? meterFactory)
        => meterFactory is null ? s_global.Value : s_byFactory.GetValue(meterFactory, static f => new IoUringMetrics(f));

    public void Register(IoUringNetwork network) => _networks.TryAdd(network, 0);

    /// <summary>Keeps the counts of a network that is going away.</summary>
    public void Retire(IoUringNetwork network)
    {
        if (!_networks.TryRemove(network, out _))
        {
            return;
        }
        lock (_retiredLock)
        {
            foreach (EventLoop loop in network.Loops)
            {
                _retired += loop.Counters;
            }
        }
    }

    public void ConnectionOpened()
    {
        _opened.Add(1);
        _active.Add(1);
    }

    /// <summary>Once per connection (its context's first dispose). Its bytes are in its loop's counters already.</summary>
    public void ConnectionClosed() => _active.Add(-1);

    /// <summary>A level (not a count) over the live networks' loops: gone networks hold nothing.</summary>
    private long SumLive(Func<EventLoopCounters, long> select)
    {
        long total = 0;
        foreach (IoUringNetwork network in _networks.Keys)
        {
            foreach (EventLoop loop in network.Loops)
            {
                total += select(loop.Counters);
            }
        }
        return total;
    }

    private long Sum(Func<EventLoopCounters, long> select)
    {
        long total;
        lock (_retiredLock)
        {
            total = select(_retired);
        }
        foreach (IoUringNetwork network in _networks.Keys)
        {
            foreach (EventLoop loop in network.Loops)
            {
                total += select(loop.Counters);
            }
        }
        return total;
    }
}
