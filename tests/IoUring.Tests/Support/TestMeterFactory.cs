using System.Diagnostics.Metrics;

namespace IoUring.Tests.Support;

/// <summary>An <see cref="IMeterFactory"/> as a host's (Microsoft.Extensions.Diagnostics' is not referenced here): its
/// meters are scoped to it and disposed with it.</summary>
internal sealed class TestMeterFactory : IMeterFactory
{
    private readonly List<Meter> _meters = [];

    public Meter Create(MeterOptions options)
    {
        options.Scope = this;
        var meter = new Meter(options);
        lock (_meters)
        {
            _meters.Add(meter);
        }
        return meter;
    }

    public void Dispose()
    {
        lock (_meters)
        {
            _meters.ForEach(m => m.Dispose());
        }
    }
}
