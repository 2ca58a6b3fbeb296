using System.Diagnostics.Metrics;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Buffers;
using Microsoft.Extensions.DependencyInjection;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// The memory held by one host's Kestrel memory pools (the transports' and Kestrel's own buffers), from the pool
/// metrics of .NET 10 ("Microsoft.AspNetCore.MemoryPool"). Only this host's meters are listened to (their scope is
/// the host's IMeterFactory), so servers of tests running in parallel do not count. Where the io_uring transport gives
/// its connections the loops' own pools instead of Kestrel's, their blocks are added (read from the pools' counts).
/// </summary>
internal sealed class PoolMeter : IDisposable
{
    private const string MeterName = "Microsoft.AspNetCore.MemoryPool";

    private readonly MeterListener _listener = new();
    private readonly Lock _lock = new();
    private long _allocated;
    private long _evicted;
    private long _pooled;
    private long _peakRented;

    private readonly IoUring.Buffers.PinnedBlockMemoryPool[] _loopPools;
    private readonly IoUring.Buffers.ReceiveBlockPool[] _receiveBlocks; // what io_uring connections' Inputs hold (ring buffers kept without a copy)

    public PoolMeter(TestServer server)
        : this(server.App.Services)
    {
        _loopPools = server.Transport == TransportKind.IoUring
            && server.App.Services.GetServices<Microsoft.AspNetCore.Connections.IConnectionListenerFactory>().OfType<IoUringTransportFactory>().LastOrDefault()?.Network is { } network
            && network.MemoryPool is IoUring.Buffers.PinnedBlockMemoryPool // the loops' own pools, not Kestrel's
            ? network.Loops.Select(l => (IoUring.Buffers.PinnedBlockMemoryPool)l.MemoryPool).ToArray()
            : [];
        _receiveBlocks = server.Transport == TransportKind.IoUring
            && server.App.Services.GetServices<Microsoft.AspNetCore.Connections.IConnectionListenerFactory>().OfType<IoUringTransportFactory>().LastOrDefault()?.Network is { } n
            ? n.Loops.Select(l => l.ReceiveBuffers.Spares).ToArray()
            : [];
    }

    public PoolMeter(IServiceProvider services)
    {
        _loopPools = [];
        _receiveBlocks = [];
        IMeterFactory factory = services.GetRequiredService<IMeterFactory>();
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == MeterName && ReferenceEquals(instrument.Meter.Scope, factory))
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((instrument, value, _, _) => OnMeasurement(instrument.Name, value));
        _listener.Start();
    }

    /// <summary>Bytes the pools allocated and still hold (rented out or idle in the pool).</summary>
    public long Held
    {
        get
        {
            lock (_lock)
            {
                return _allocated - _evicted + _loopPools.Sum(p => (long)(p.RentedBlocks + p.RetainedBlocks) * p.BlockBytes)
                    + _receiveBlocks.Sum(p => p.RetainedBlocks * p.BlockSize);
            }
        }
    }

    /// <summary>Bytes rented out now: held minus idle in the pool.</summary>
    public long Rented
    {
        get
        {
            lock (_lock)
            {
                return _allocated - _evicted - _pooled + _loopPools.Sum(p => (long)p.RentedBlocks * p.BlockBytes)
                    + _receiveBlocks.Sum(p => p.HeldBlocks * p.BlockSize);
            }
        }
    }

    /// <summary>The most bytes rented out at once since the last <see cref="ResetPeak"/>.</summary>
    public long PeakRented
    {
        get
        {
            lock (_lock)
            {
                // The loop pools' peaks add up to at least the combined peak: a bound on it, never below it.
                return _peakRented + _loopPools.Sum(p => (long)p.PeakRentedBlocks * p.BlockBytes)
                    + _receiveBlocks.Sum(p => p.PeakHeldBlocks * p.BlockSize);
            }
        }
    }

    public void ResetPeak()
    {
        lock (_lock)
        {
            _peakRented = _allocated - _evicted - _pooled;
        }
        foreach (IoUring.Buffers.PinnedBlockMemoryPool pool in _loopPools)
        {
            pool.ResetPeak();
        }
        foreach (IoUring.Buffers.ReceiveBlockPool blocks in _receiveBlocks)
        {
            blocks.ResetPeak();
        }
    }

    private void OnMeasurement(string instrument, long value)
    {
        lock (_lock)
        {
            switch (instrument)
            {
                case "aspnetcore.memory_pool.allocated":
                    _allocated += value;
                    break;
                case "aspnetcore.memory_pool.evicted":
                    _evicted += value;
                    break;
                case "aspnetcore.memory_pool.pooled":
                    _pooled += value;
                    break;
                default:
                    return;
            }
            _peakRented = Math.Max(_peakRented, _allocated - _evicted - _pooled);
        }
    }

    public void Dispose() => _listener.Dispose();
}
