using System.Diagnostics.Metrics;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Reflection;
using System.Text;
using IoUring.AspNetCore.Internal;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Buffers;
using IoUring.Diagnostics;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore.Tests;

/// <summary>What only the io_uring transport has: the fallback, its options, its meter, its outbound connections.</summary>
public sealed class IoUringTransportTests
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    [Theory]
    [InlineData(nameof(IoUringTransportOptions.LoopCount))]
    [InlineData(nameof(IoUringTransportOptions.Backlog))]
    [InlineData(nameof(IoUringTransportOptions.MaxReadBufferSize))]
    [InlineData(nameof(IoUringTransportOptions.MaxWriteBufferSize))]
    [InlineData(nameof(IoUringTransportOptions.SubmissionQueueSize))]
    [InlineData(nameof(IoUringTransportOptions.CompletionQueueSize))]
    [InlineData(nameof(IoUringTransportOptions.BufferRingCount))]
    [InlineData(nameof(IoUringTransportOptions.BufferRingBufferSize))]
    [InlineData(nameof(IoUringTransportOptions.ZeroCopySendThreshold))]
    public void Invalid_option_throws_ArgumentException_naming_it(string option)
    {
        var options = new IoUringTransportOptions();
        switch (option)
        {
            case nameof(IoUringTransportOptions.LoopCount): options.LoopCount = 0; break;
            case nameof(IoUringTransportOptions.Backlog): options.Backlog = 0; break;
            case nameof(IoUringTransportOptions.MaxReadBufferSize): options.MaxReadBufferSize = -1; break;
            case nameof(IoUringTransportOptions.MaxWriteBufferSize): options.MaxWriteBufferSize = -1; break;
            case nameof(IoUringTransportOptions.SubmissionQueueSize): options.SubmissionQueueSize = 100; break;
            case nameof(IoUringTransportOptions.CompletionQueueSize): options.CompletionQueueSize = 16; break;
            case nameof(IoUringTransportOptions.BufferRingCount): options.BufferRingCount = 3; break;
            case nameof(IoUringTransportOptions.BufferRingBufferSize): options.BufferRingBufferSize = 1; break;
            case nameof(IoUringTransportOptions.ZeroCopySendThreshold): options.ZeroCopySendThreshold = 0; break;
        }

        ArgumentException error = Assert.Throws<ArgumentException>(options.Validate);
        Assert.Equal(option, error.ParamName);
        Assert.StartsWith($"{option} must be", error.Message); // the option set here, not the lower layer's name for it
        Assert.Equal(option, Assert.Throws<ArgumentException>(() => new IoUringTransportFactory(Options.Create(options), NullLoggerFactory.Instance)).ParamName);
    }

    [Fact]
    public void Kestrel_options_reach_the_connections_with_kestrels_exception_types()
    {
        var options = new IoUringTransportOptions { NoDelay = false, MaxReadBufferSize = 12345, MaxWriteBufferSize = 6789, UnsafePreferInlineScheduling = true, ZeroCopySendThreshold = 99999, MultishotAccept = false };
        IoUring.Net.IoUringNetworkOptions network = options.ToNetworkOptions();
        IoUringTransport.UseKestrelExceptions(network);

        IoUring.Net.ConnectionSettings settings = IoUring.Net.ConnectionSettings.From(network, System.Buffers.MemoryPool<byte>.Shared, new IoUring.Net.ConnectionRegistry(), IoUring.Rings.IoUringCapabilities.Current);

        Assert.False(settings.NoDelay);
        Assert.False(settings.MultishotAccept);
        Assert.Equal(12345, settings.MaxReadBufferSize);
        Assert.Equal(6789, settings.MaxWriteBufferSize);
        Assert.True(settings.UnsafePreferInlineScheduling);
        Assert.Equal(99999, settings.ZeroCopySendThreshold);
        Assert.IsType<ConnectionResetException>(settings.CreateResetException("reset"));
        Assert.IsType<ConnectionAbortedException>(settings.CreateAbortedException("aborted"));
    }

    [Fact]
    public async Task Invalid_option_fails_the_host_start()
    {
        ArgumentException error = await Assert.ThrowsAsync<ArgumentException>(() => TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o =>
            o.IoUring = u => u.LoopCount = -1));

        Assert.Equal(nameof(IoUringTransportOptions.LoopCount), error.ParamName);
    }

    [Fact]
    public void Defaults_match_the_sockets_transport()
    {
        var ours = new IoUringTransportOptions();
        var sockets = new Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets.SocketTransportOptions();

        Assert.Equal(sockets.Backlog, ours.Backlog);
        Assert.Equal(sockets.NoDelay, ours.NoDelay);
        Assert.Equal(sockets.MaxReadBufferSize, ours.MaxReadBufferSize);
        Assert.Equal(sockets.MaxWriteBufferSize, ours.MaxWriteBufferSize);
        Assert.Equal(sockets.UnsafePreferInlineScheduling, ours.UnsafePreferInlineScheduling);
        Assert.Equal(Environment.ProcessorCount, ours.LoopCount);
        Assert.False(ours.ThrowIfUnavailable);
    }

    [Fact]
    public async Task Connections_use_their_loops_registered_pool_where_zero_copy_can_use_it_and_kestrels_otherwise()
    {
        Assert.True(IoUring.Rings.IoUringCapabilities.Current.HasZeroCopySend); // every kernel the transport runs on (6.0+)
        foreach ((Action<IoUringTransportOptions>? configure, string expected) in new (Action<IoUringTransportOptions>?, string)[]
        {
            (null, "IoUring.Buffers.PinnedBlockMemoryPool"),                                       // the default
            (o => o.UseLoopMemoryPools = false, "Microsoft.AspNetCore."),                      // turned off
            (o => o.ZeroCopySendThreshold = null, "Microsoft.AspNetCore."),                    // no zero-copy: nothing to gain
        })
        {
            await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o => o.IoUring = configure);
            using HttpClient client = server.CreateClient();

            Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));

            ConnectionTracker.Tracked connection = server.Connections.All.Single();
            Assert.Equal("IoUringConnectionContext", connection.ContextType);
            Assert.StartsWith(expected, connection.MemoryPoolType); // IMemoryPoolFeature: the pool the pipes use
        }
    }

    [Fact]
    public async Task Every_ring_owner_of_a_connection_is_freed_when_it_closes()
    {
        var probe = new AppProbe();
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(probe));
        var factory = (IoUringTransportFactory)server.App.Services.GetServices<IConnectionListenerFactory>().Last();
        IoUring.Net.IoUringNetwork network = factory.Network!;
        int LiveOwners() => network.Loops.Sum(l => l.LiveOwners);
        int baseline = LiveOwners();

        for (int i = 0; i < 40; i++)
        {
            using Socket socket = await server.ConnectAsync();
            await RawClient.SendAsync(socket, (i % 4) switch
            {
                0 => "GET /plaintext HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n", // server FIN
                1 => "GET /abort HTTP/1.1\r\nHost: test\r\n\r\n",                         // server RST
                _ => "GET /plaintext HTTP/1.1\r\nHost: test\r\n\r\n",                      // client FIN or RST
            });
            await RawClient.ReceiveUntilAsync(socket, t => i % 4 == 1 || t.Contains("Hello, World!", StringComparison.Ordinal));
            if (i % 4 == 3)
            {
                RawClient.Reset(socket);
            }
        }
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed.WaitAsync(s_hangGuard)));

        // Kestrel disposes each connection after its ConnectionClosed; the owners go with the last completions.
        for (int attempt = 0; LiveOwners() != baseline && attempt < 300; attempt++)
        {
            await Task.Delay(100);
        }
        Assert.Equal(baseline, LiveOwners());
    }

    [Fact]
    public async Task Tiny_buffer_ring_loses_no_byte()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o =>
            o.IoUring = u => { u.BufferRingCount = 16; u.BufferRingBufferSize = 1024; });
        using HttpClient client = server.CreateClient();
        const long Length = (16L << 20) + 11;

        HttpResponseMessage[] responses = await Task.WhenAll(Enumerable.Range(0, 4).Select(_ => client.PostAsync("upload", Pattern.Content(Length))));

        foreach (HttpResponseMessage response in responses)
        {
            Assert.Equal(TestApp.Describe(Length), await response.Content.ReadAsStringAsync());
            response.Dispose();
        }
    }

    [Fact]
    public async Task Meter_reports_loop_work_connections_and_bytes()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        var meterFactory = server.App.Services.GetRequiredService<IMeterFactory>();
        var values = new Dictionary<string, long>();
        using var listener = new MeterListener
        {
            InstrumentPublished = (instrument, l) =>
            {
                if (instrument.Meter.Name == IoUringMetrics.MeterName && instrument.Meter.Scope == meterFactory)
                {
                    l.EnableMeasurementEvents(instrument);
                }
            },
        };
        listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) =>
        {
            // Summed over the loops (observable instruments are recorded once, below); the bytes by direction.
            string key = instrument.Name;
            foreach (KeyValuePair<string, object?> tag in tags)
            {
                key += tag.Key == IoUringMetrics.DirectionTag ? "/" + tag.Value : "";
            }
            lock (values)
            {
                values[key] = values.GetValueOrDefault(key) + value;
            }
        });
        listener.Start();

        using HttpClient client = server.CreateClient();
        for (int i = 0; i < 5; i++)
        {
            Assert.Equal("Hello, World!", await client.GetStringAsync("plaintext"));
        }
        listener.RecordObservableInstruments();

        lock (values)
        {
            Assert.True(values["iouring.loop.syscalls"] > 0);
            Assert.True(values["iouring.loop.sqes"] > 0);
            Assert.True(values["iouring.loop.cqes"] > 0);
            Assert.True(values.ContainsKey("iouring.loop.cq_overflows"));
            Assert.True(values.ContainsKey("iouring.loop.buffer_ring_exhaustions"));
            Assert.Equal(0, values["iouring.loop.receive_buffers_lost"]);
            Assert.True(values["iouring.connection.io/receive"] > 5 * "GET /plaintext HTTP/1.1\r\n".Length);
            Assert.True(values["iouring.connection.io/transmit"] > 5 * "Hello, World!".Length);
            Assert.Equal(1, values["iouring.connection.opened"]);
            Assert.Equal(1, values["iouring.connection.active"]); // the client keeps its connection open
            Assert.Equal(0, values["iouring.connection.zero_copy.sends"]); // small responses: plain sends
            Assert.True(values.ContainsKey("iouring.connection.zero_copy.copied"));
            Assert.True(values.ContainsKey("iouring.memory_pool.used"));
            Assert.True(values["iouring.memory_pool.registered"] > 0); // the loops' pools' regions, registered with their rings
        }
    }

    [Fact]
    public async Task The_start_log_names_each_feature_on_or_off_with_the_reason()
    {
        string defaults = await StartLineAsync(null);
        string changed = await StartLineAsync(o => { o.ReadFilesOnLoops = false; o.ReportIoWait = true; o.UseLoopMemoryPools = false; });

        Assert.StartsWith($"io_uring transport started: kernel {File.ReadAllText("/proc/sys/kernel/osrelease").Trim()}, 1 loop; ", defaults);
        foreach (string feature in new[] { "DEFER_TASKRUN", "NO_SQARRAY", "registered ring fd", "buffer ring", "multishot receive byte cap",
            "receive bundles", "zero-copy sends", "registered send buffers", "NO_IOWAIT", "SCHED_BATCH", "file reads on loops" })
        {
            // Each named once, as on or as off with its reason in parentheses.
            Assert.Single(System.Text.RegularExpressions.Regex.Matches(defaults, $"; {feature} (on|off \\([^)]+\\))(;|\\.$| \\()"));
        }
        Assert.Contains("; buffer ring on (512 x 8192 B per loop)", defaults);
        Assert.Contains("; file reads on loops on", defaults);
        Assert.Contains("; registered send buffers on", defaults);
        Assert.Contains(IoUring.Rings.IoUringCapabilities.Current.HasNoIoWait ? "; NO_IOWAIT on" : "; NO_IOWAIT off (kernel ", defaults);

        Assert.Contains("; file reads on loops off (option ReadFilesOnLoops)", changed);
        Assert.Contains("; NO_IOWAIT off (option ReportIoWait)", changed);
        Assert.Contains("; registered send buffers off (option UseLoopMemoryPools)", changed);
        Assert.Contains("; zero-copy sends off (option UseLoopMemoryPools)", changed);

        static async Task<string> StartLineAsync(Action<IoUringTransportOptions>? configure)
        {
            await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()), o => o.IoUring = u =>
            {
                u.LoopCount = 1;
                configure?.Invoke(u);
            });
            TestLogs.LogRecord started = Assert.Single(server.Logs.Where(IoUringTransportLog.Category, eventId: 102));
            Assert.Equal(LogLevel.Information, started.Level);
            Assert.Equal("TransportStarted", started.EventId.Name);
            Assert.DoesNotContain('\n', started.Message); // one line, to paste into an issue
            return started.Message;
        }
    }

    [Fact]
    public async Task Peer_fin_is_logged_with_the_sockets_transport_event_id()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        using (Socket fin = await server.ConnectAsync())
        {
            await server.Connections.First.WaitAsync(s_hangGuard);
            fin.Shutdown(SocketShutdown.Send);
            await RawClient.DrainAsync(fin);
        }
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed.WaitAsync(s_hangGuard)));

        TestLogs.LogRecord readFin = Assert.Single(server.Logs.Where(IoUringTransportLog.Category, eventId: 6));
        Assert.Equal(LogLevel.Debug, readFin.Level);
        Assert.Equal("ConnectionReadFin", readFin.EventId.Name);
        // Our FIN back is logged once, as the Sockets transport does (Kestrel's Abort(null), then the dispose).
        TestLogs.LogRecord writeFin = Assert.Single(server.Logs.Where(IoUringTransportLog.Category, eventId: 7));
        Assert.Equal("ConnectionWriteFin", writeFin.EventId.Name);
    }

    [Fact]
    public async Task Factories_share_loops_when_given_the_same_options_and_services_and_the_last_one_stops_them()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        var options = Options.Create(new IoUringTransportOptions { LoopCount = 1 });
        using var otherLoggers = new LoggerFactory();
        var a = new IoUringConnectionFactory(options, NullLoggerFactory.Instance);
        var b = new IoUringConnectionFactory(options, NullLoggerFactory.Instance);
        await using var c = new IoUringConnectionFactory(options, otherLoggers); // another host's services: its own loops
        IoUring.Net.IoUringNetwork shared = a.NetworkOrNull()!;
        Assert.Same(shared, b.NetworkOrNull());
        Assert.NotSame(shared, c.NetworkOrNull());

        await a.DisposeAsync(); // b still holds the loops
        await using (ConnectionContext connection = await b.ConnectAsync(server.EndPoint).AsTask().WaitAsync(s_hangGuard))
        {
            Assert.Equal(1, shared.ConnectionCount);
        }
        await b.DisposeAsync(); // the last holder: the loops stop
        Assert.All(shared.Loops, loop => Assert.True(loop.Stopped.IsCompleted));
        await Assert.ThrowsAsync<ObjectDisposedException>(async () => await b.ConnectAsync(server.EndPoint));
    }

    [Fact]
    public async Task Outbound_connection_factory_connects_and_gives_the_same_features()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        await using var factory = new IoUringConnectionFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);

        ConnectionContext connection = await factory.ConnectAsync(server.EndPoint).AsTask().WaitAsync(s_hangGuard);
        var closed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        int fired = 0;
        connection.ConnectionClosed.Register(() => { Interlocked.Increment(ref fired); closed.TrySetResult(); });

        Assert.Equal(server.EndPoint, connection.RemoteEndPoint);
        Assert.Equal(connection.LocalEndPoint, connection.Features.Get<IConnectionEndPointFeature>()!.LocalEndPoint);
        Assert.NotNull(connection.Features.Get<IMemoryPoolFeature>()!.MemoryPool);
        Assert.Same(connection, connection.Features.Get<IConnectionLifetimeFeature>());

        await connection.Transport.Output.WriteAsync(Encoding.ASCII.GetBytes("GET /plaintext HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"));
        string response = await ReadToEndAsync(connection.Transport.Input);

        Assert.StartsWith("HTTP/1.1 200 OK", response);
        Assert.EndsWith("Hello, World!", response);
        await closed.Task.WaitAsync(s_hangGuard); // the server's FIN
        await connection.Transport.Output.CompleteAsync();
        await connection.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        Assert.Equal(1, fired);
    }

    [Fact]
    public async Task Feature_collection_answers_Get_the_same_as_its_indexer_and_its_enumeration()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        await using var factory = new IoUringConnectionFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);
        await using ConnectionContext connection = await factory.ConnectAsync(server.EndPoint).AsTask().WaitAsync(s_hangGuard);
        IFeatureCollection features = connection.Features;
        MethodInfo get = typeof(IFeatureCollection).GetMethod(nameof(IFeatureCollection.Get))!;
        object? Get(Type type) => get.MakeGenericMethod(type).Invoke(features, null);

        // Every feature interface the context implements is listed, and nothing else (the 7 Kestrel's Sockets transport
        // gives, and ILoopFilesFeature: SendFileAsync on the loop).
        List<Type> own = features.Select(pair => pair.Key).ToList();
        Type[] implemented = connection.GetType().GetInterfaces().Where(i => i != typeof(IFeatureCollection) && i.Name.EndsWith("Feature", StringComparison.Ordinal)).ToArray();
        Assert.Equal(implemented.OrderBy(t => t.FullName), own.OrderBy(t => t.FullName));
        Assert.Equal(8, own.Count);
        foreach (Type type in own)
        {
            Assert.Same(connection, Get(type));
            Assert.Same(connection, features[type]);
        }
        Assert.Null(Get(typeof(ITlsHandshakeFeature)));
        Assert.Null(features[typeof(ITlsHandshakeFeature)]);

        // A replaced own feature and an added one: Get, the indexer and the enumeration agree.
        var items = new ItemsFeature();
        features.Set<IConnectionItemsFeature>(items);
        features.Set<ITlsHandshakeFeature>(null);
        Assert.Same(items, features.Get<IConnectionItemsFeature>());
        Assert.Same(items, features[typeof(IConnectionItemsFeature)]);
        Assert.Same(items, features.Single(pair => pair.Key == typeof(IConnectionItemsFeature)).Value);
        Assert.Null(features.Get<ITlsHandshakeFeature>());
        Assert.Equal(8, features.Count());
    }

    private sealed class ItemsFeature : IConnectionItemsFeature
    {
        public IDictionary<object, object?> Items { get; set; } = new Dictionary<object, object?>();
    }

    [Fact]
    public async Task Outbound_connect_to_a_closed_port_is_refused()
    {
        await using var factory = new IoUringConnectionFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);
        using var probe = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        probe.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        EndPoint unused = probe.LocalEndPoint!; // bound, never listening: connects are refused

        SocketException error = await Assert.ThrowsAsync<SocketException>(() => factory.ConnectAsync(unused).AsTask().WaitAsync(s_hangGuard));

        Assert.Equal(SocketError.ConnectionRefused, error.SocketErrorCode);
    }

    [Fact]
    public async Task Server_reset_reads_as_ConnectionResetException_on_an_outbound_connection()
    {
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, TestApp.Map(new AppProbe()));
        await using var factory = new IoUringConnectionFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);
        ConnectionContext connection = await factory.ConnectAsync(server.EndPoint).AsTask().WaitAsync(s_hangGuard);

        await connection.Transport.Output.WriteAsync(Encoding.ASCII.GetBytes("GET /abort HTTP/1.1\r\nHost: test\r\n\r\n"));

        await Assert.ThrowsAsync<ConnectionResetException>(() => ReadToEndAsync(connection.Transport.Input));
        await connection.Transport.Output.CompleteAsync();
        await connection.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
    }

    private static async Task<string> ReadToEndAsync(PipeReader reader)
    {
        var text = new StringBuilder();
        while (true)
        {
            ReadResult result = await reader.ReadAsync().AsTask().WaitAsync(s_hangGuard);
            foreach (ReadOnlyMemory<byte> segment in result.Buffer)
            {
                text.Append(Encoding.ASCII.GetString(segment.Span));
            }
            reader.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                return text.ToString();
            }
        }
    }
}
