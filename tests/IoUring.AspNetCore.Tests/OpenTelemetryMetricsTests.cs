using System.Diagnostics.Metrics;
using IoUring.AspNetCore.Internal;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Diagnostics;
using Microsoft.Extensions.DependencyInjection;
using OpenTelemetry.Metrics;

namespace IoUring.AspNetCore.Tests;

/// <summary>
/// The "IoUring" meter as an OpenTelemetry user gets it: the SDK with an in-memory exporter in a Kestrel app on
/// io_uring under load, every instrument of docs/metrics.md with its type, unit and one series per loop.
/// </summary>
public sealed class OpenTelemetryMetricsTests
{
    private const int LoopCount = 2;
    private const int Clients = 4;              // one connection each
    private const int GetsPerClient = 25;
    private const long UploadLength = (300 << 10) + 7;
    private const long DownloadLength = (400 << 10) + 3;
    private const string Get = "GET /plaintext HTTP/1.1\r\n";
    private const string Ok = "HTTP/1.1 200 OK\r\n";
    private const string Hello = "Hello, World!";
    private const string LoopIdTag = IoUringMetrics.LoopIdTag;

    /// <summary>Every instrument (docs/metrics.md), its type, unit, and the values of its own tag besides the loop id.</summary>
    private static readonly Dictionary<string, (MetricType Type, string Unit, string? Tag, string[] Values)> s_instruments = new()
    {
        ["iouring.loop.syscalls"] = (MetricType.LongSum, "{call}", null, []),
        ["iouring.loop.sqes"] = (MetricType.LongSum, "{entry}", null, []),
        ["iouring.loop.cqes"] = (MetricType.LongSum, "{entry}", null, []),
        ["iouring.loop.cq_overflows"] = (MetricType.LongSum, "{event}", null, []),
        ["iouring.loop.buffer_ring_exhaustions"] = (MetricType.LongSum, "{event}", null, []),
        ["iouring.loop.receive_buffers_lost"] = (MetricType.LongSum, "{buffer}", null, []),
        ["iouring.loop.wakeups"] = (MetricType.LongSum, "{wakeup}", null, []),
        ["iouring.loop.handler_exceptions"] = (MetricType.LongSum, "{exception}", null, []),
        ["iouring.connection.io"] = (MetricType.LongSum, "By", IoUringMetrics.DirectionTag, ["receive", "transmit"]),
        ["iouring.connection.zero_copy.sends"] = (MetricType.LongSum, "{send}", IoUringMetrics.ZeroCopyBufferTag, ["pinned", "registered"]),
        ["iouring.connection.zero_copy.copied"] = (MetricType.LongSum, "{send}", null, []),
        ["iouring.file.reads"] = (MetricType.LongSum, "{read}", null, []),
        ["iouring.file.io"] = (MetricType.LongSum, "By", null, []),
        ["iouring.udp.datagrams"] = (MetricType.LongSum, "{datagram}", IoUringMetrics.DirectionTag, ["receive", "transmit"]),
        ["iouring.udp.io"] = (MetricType.LongSum, "By", IoUringMetrics.DirectionTag, ["receive", "transmit"]),
        ["iouring.udp.dropped"] = (MetricType.LongSum, "{datagram}", null, []),
        ["iouring.udp.truncated"] = (MetricType.LongSum, "{datagram}", null, []),
        ["iouring.udp.segment_offloads"] = (MetricType.LongSum, "{send}", null, []),
        ["iouring.udp.coalesced_receives"] = (MetricType.LongSum, "{receive}", null, []),
        ["iouring.connection.opened"] = (MetricType.LongSum, "{connection}", null, []),
        ["iouring.connection.active"] = (MetricType.LongSumNonMonotonic, "{connection}", null, []),
        ["iouring.memory_pool.used"] = (MetricType.LongSumNonMonotonic, "By", null, []),
        ["iouring.memory_pool.registered"] = (MetricType.LongSumNonMonotonic, "By", null, []),
    };

    [Fact]
    public async Task Sdk_exports_every_instrument_per_loop_with_the_bytes_and_connections_of_a_loaded_server()
    {
        var exported = new List<MetricSnapshot>();
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o =>
        {
            o.IoUring = u => u.LoopCount = LoopCount;
            o.Services = services => services.AddOpenTelemetry().WithMetrics(metrics => KeepOnlyThisHost(metrics
                .AddMeter(IoUringMetrics.MeterName)
                .AddInMemoryExporter(exported)));
        });
        MeterProvider meterProvider = server.App.Services.GetRequiredService<MeterProvider>();

        // Load: every client on its own connection, small requests, then a large upload and a large download.
        HttpClient[] clients = Enumerable.Range(0, Clients).Select(_ => server.CreateClient(handler: new SocketsHttpHandler { MaxConnectionsPerServer = 1 })).ToArray();
        await Task.WhenAll(clients.Select(async client =>
        {
            for (int i = 0; i < GetsPerClient; i++)
            {
                Assert.Equal(Hello, await client.GetStringAsync("plaintext"));
            }
            using HttpResponseMessage upload = await client.PostAsync("upload", Pattern.Content(UploadLength));
            Assert.Equal(TestApp.Describe(UploadLength), await upload.Content.ReadAsStringAsync());
            Assert.Equal(DownloadLength, (await client.GetByteArrayAsync($"download?size={DownloadLength}")).Length);
        }));
        long received = Clients * (UploadLength + GetsPerClient * Get.Length);               // at least: bodies and request lines
        long sent = Clients * (DownloadLength + GetsPerClient * (Ok.Length + Hello.Length));  // at least: bodies and status lines
        int connections = server.Connections.All.Count;
        Assert.True(connections >= Clients, $"{connections} connections");

        Dictionary<string, MetricSnapshot> loaded = Collect(meterProvider, exported);

        Assert.Equal(s_instruments.Keys.Order(), loaded.Keys.Order());
        string version = typeof(IoUring.Net.IoUringNetwork).Assembly.GetCustomAttributes(typeof(System.Reflection.AssemblyInformationalVersionAttribute), false)
            .OfType<System.Reflection.AssemblyInformationalVersionAttribute>().Single().InformationalVersion;
        Assert.All(loaded.Values, m => Assert.Equal(version, m.MeterVersion));
        foreach ((string name, (MetricType type, string unit, string? tag, string[] values)) in s_instruments)
        {
            MetricSnapshot metric = loaded[name];
            Assert.True(type == metric.MetricType, $"{name}: {metric.MetricType}");
            Assert.True(unit == metric.Unit, $"{name}: {metric.Unit}");
            // One series per loop (and per value of the instrument's own tag), tagged with the loop id.
            string[] all = Enumerable.Range(0, LoopCount).SelectMany(id => tag is null ? [Series((LoopIdTag, id))] : values.Select(v => Series((LoopIdTag, id), (tag, v)))).Order().ToArray();
            string[] series = metric.MetricPoints.Select(p => Series(Tags(p))).Order().ToArray();
            if (name is "iouring.connection.opened" or "iouring.connection.active")
            {
                // Changed once per connection: series only for the loops that got connections (the kernel picks the loop).
                Assert.NotEmpty(series);
                Assert.Equal(series.Distinct(), series);
                Assert.All(series, s => Assert.Contains(s, all));
            }
            else
            {
                Assert.Equal(all, series);
            }
        }
        foreach (string name in new[] { "iouring.loop.syscalls", "iouring.loop.sqes", "iouring.loop.cqes" })
        {
            Assert.All(loaded[name].MetricPoints, p => Assert.True(p.GetSumLong() > 0, $"{name} of loop {LoopId(p)}: {p.GetSumLong()}"));
        }
        Assert.Equal(0, Sum(loaded, "iouring.loop.receive_buffers_lost"));
        Assert.Equal(0, Sum(loaded, "iouring.loop.handler_exceptions"));
        Assert.True(Sum(loaded, "iouring.connection.io", "receive") >= received, $"received {Sum(loaded, "iouring.connection.io", "receive")} < {received}");
        Assert.True(Sum(loaded, "iouring.connection.io", "transmit") >= sent, $"sent {Sum(loaded, "iouring.connection.io", "transmit")} < {sent}");
        Assert.Equal(connections, Sum(loaded, "iouring.connection.opened"));
        Assert.Equal(connections, Sum(loaded, "iouring.connection.active")); // the clients keep theirs open
        Assert.True(Sum(loaded, "iouring.memory_pool.registered") > 0);      // the loops' pools' regions, registered with their rings

        foreach (HttpClient client in clients)
        {
            client.Dispose();
        }
        Dictionary<string, MetricSnapshot> closed = loaded;
        await Eventually.HoldsAsync(() => Sum(closed = Collect(meterProvider, exported), "iouring.connection.active") == 0);

        Assert.Equal(0, Sum(closed, "iouring.connection.active"));
        Assert.Equal(connections, Sum(closed, "iouring.connection.opened"));
        Assert.True(Sum(closed, "iouring.loop.syscalls") >= Sum(loaded, "iouring.loop.syscalls")); // counters, not levels
        Assert.True(Sum(closed, "iouring.connection.io", "receive") >= Sum(loaded, "iouring.connection.io", "receive"));
    }

    /// <summary>
    /// The SDK listens to meters by name, and this test process runs many hosts at once, each with its own "IoUring"
    /// meter (and the process-wide one of factories made without an IMeterFactory): only this host's are exported.
    /// </summary>
    private static void KeepOnlyThisHost(MeterProviderBuilder metrics)
        => ((IDeferredMeterProviderBuilder)metrics).Configure((services, builder) =>
        {
            IMeterFactory meterFactory = services.GetRequiredService<IMeterFactory>();
            builder.AddView(instrument => instrument.Meter.Scope == meterFactory ? null : MetricStreamConfiguration.Drop);
        });

    /// <summary>Collects now (the in-memory exporter exports only when flushed) and returns what it exported, by name.</summary>
    private static Dictionary<string, MetricSnapshot> Collect(MeterProvider meterProvider, List<MetricSnapshot> exported)
    {
        exported.Clear();
        Assert.True(meterProvider.ForceFlush(10_000));
        return exported.ToDictionary(m => m.Name);
    }

    private static long Sum(Dictionary<string, MetricSnapshot> metrics, string name, string? tagValue = null)
        => metrics[name].MetricPoints.Where(p => tagValue is null || Tags(p).Any(t => Equals(t.Value, tagValue))).Sum(p => p.GetSumLong());

    private static int LoopId(MetricPoint point) => Convert.ToInt32(Tags(point).Single(t => t.Key == LoopIdTag).Value, System.Globalization.CultureInfo.InvariantCulture);

    private static (string Key, object? Value)[] Tags(MetricPoint point)
    {
        var tags = new List<(string, object?)>();
        foreach (KeyValuePair<string, object?> tag in point.Tags)
        {
            tags.Add((tag.Key, tag.Value));
        }
        return [.. tags];
    }

    /// <summary>A series as the assertions name it: its tags, by key ("iouring.loop.id=1 network.io.direction=receive").</summary>
    private static string Series(params (string Key, object? Value)[] tags)
        => string.Join(' ', tags.OrderBy(t => t.Key, StringComparer.Ordinal).Select(t => $"{t.Key}={t.Value}"));
}
