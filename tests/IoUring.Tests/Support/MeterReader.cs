using System.Diagnostics.Metrics;
using IoUring.Diagnostics;

namespace IoUring.Tests.Support;

/// <summary>
/// Reads the observable instruments of one "IoUring" meter through a <see cref="MeterListener"/>, as an exporter does:
/// the meter of one <see cref="IMeterFactory"/>, or the process-wide one (no factory: a meter without a scope).
/// </summary>
internal sealed class MeterReader : IDisposable
{
    private readonly MeterListener _listener = new();
    private readonly Dictionary<string, long> _values = [];

    public MeterReader(IMeterFactory? meterFactory)
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == IoUringMetrics.MeterName && instrument.Meter.Scope == meterFactory)
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) =>
        {
            // "name/loop id", then "/value" of the instrument's own tag if it has one (the direction, say).
            object? loop = null;
            string part = "";
            foreach (KeyValuePair<string, object?> tag in tags)
            {
                if (tag.Key == IoUringMetrics.LoopIdTag)
                {
                    loop = tag.Value;
                }
                else
                {
                    part += $"/{tag.Value}";
                }
            }
            string key = $"{instrument.Name}/{loop}{part}";
            lock (_values)
            {
                _values[key] = value;
            }
        });
        _listener.Start();
    }

    /// <summary>Every series now, by "name/loop id[/tag value]"; a series the meter did not report reads 0.</summary>
    public IReadOnlyDictionary<string, long> Read()
    {
        lock (_values)
        {
            _values.Clear();
            _listener.RecordObservableInstruments();
            return new Dictionary<string, long>(_values);
        }
    }

    public void Dispose() => _listener.Dispose();
}
