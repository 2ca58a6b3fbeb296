using System.Diagnostics.Metrics;
using Microsoft.Extensions.DependencyInjection;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// The memory held by one host's Kestrel memory pools (the transports' and Kestrel's own buffers), from the pool
/// metrics of .NET 10 ("Microsoft.AspNetCore.MemoryPool"). Only this host's meters are listened to (their scope is
/// the host's IMeterFactory), so servers of tests running in parallel do not count.
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

    public PoolMeter(IServiceProvider services)
    {
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
                return _allocated - _evicted;
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
                return _allocated - _evicted - _pooled;
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
                return _peakRented;
            }
        }
    }

    public void ResetPeak()
    {
        lock (_lock)
        {
            _peakRented = _allocated - _evicted - _pooled;
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
