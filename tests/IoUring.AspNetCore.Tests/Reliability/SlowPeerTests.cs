using System.Diagnostics;
using System.Net.Sockets;
using System.Text;
using IoUring.AspNetCore.Tests.Support;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// Peers that are slow on purpose, through Kestrel: slow-loris headers, bodies trickling in, and bodies the app never
/// reads. Kestrel's limits cut the first two off; the transport's MaxReadBufferSize bounds the third. Written once,
/// run on Kestrel's Sockets transport (the reference) and io_uring. Memory is the host's Kestrel memory pools (the
/// transports' receive buffers and Kestrel's own), read from their metrics.
/// </summary>
public abstract class SlowPeerTests(ITestOutputHelper output)
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);
    private static readonly TimeSpan s_closeBound = TimeSpan.FromSeconds(30); // the limits below are 2 s; this catches "never"
    private static readonly TimeSpan s_dribble = TimeSpan.FromMilliseconds(100);

    protected abstract TransportKind Transport { get; }

    private sealed class Gate
    {
        private int _started;

        public int Started => Volatile.Read(ref _started);

        public TaskCompletionSource Release { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        public void OnStarted() => Interlocked.Increment(ref _started);
    }

    private static Action<WebApplication> App(Gate gate) => app =>
    {
        app.MapGet("/plaintext", () => Results.Text("Hello, World!", "text/plain"));

        app.MapPost("/upload", async (HttpContext context) =>
        {
            (long length, string hash) = await TestApp.HashBodyAsync(context.Request.BodyReader);
            return Results.Text($"{length} {hash}");
        });

        // Does not read the body until the test releases it.
        app.MapPost("/hold", async (HttpContext context) =>
        {
            gate.OnStarted();
            await gate.Release.Task.WaitAsync(s_hangGuard);
            try
            {
                await TestApp.HashBodyAsync(context.Request.BodyReader);
            }
            catch (Exception)
            {
                // the client reset it
            }
        });
    };

    [Fact]
    public async Task Slow_loris_headers_are_cut_off_by_RequestHeadersTimeout_while_others_are_served()
    {
        const int Lorises = 200;
        await using TestServer server = await TestServer.StartAsync(Transport, App(new Gate()),
            o => o.Kestrel = k => k.Limits.RequestHeadersTimeout = TimeSpan.FromSeconds(2));
        using var pool = new PoolMeter(server);
        await ServePlaintextAsync(server, close: true); // warm up
        long rentedBefore = pool.Rented;
        pool.ResetPeak();

        // Each loris sends a request line and a header, then one more header byte every 100 ms, forever.
        var clock = Stopwatch.StartNew();
        using var lorises = new Peers();
        for (int i = 0; i < Lorises; i++)
        {
            Peer peer = await Peer.ConnectAsync(server, clock);
            await RawClient.SendAsync(peer.Socket, $"GET /plaintext HTTP/1.1\r\nHost: test\r\nX-Slow-{i}: ");
            lorises.Add(peer);
        }
        Task dribbling = DribbleAsync(lorises, (byte)'a');
        (int served, int servedWhileAllOpen, TimeSpan maxLatency) = await ServeUntilAsync(server, lorises);
        await dribbling;
        long peak = pool.PeakRented - rentedBefore;
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed.WaitAsync(s_hangGuard))); // the server side let go too
        long rentedAfter = await SettledRentedAsync(pool, rentedBefore);

        TimeSpan first = lorises.Min(l => l.ClosedAfter), last = lorises.Max(l => l.ClosedAfter);
        int answered408 = lorises.Count(l => l.Received.StartsWith("HTTP/1.1 408 ", StringComparison.Ordinal));
        output.WriteLine($"{Transport}: {Lorises} lorises closed after {first.TotalSeconds:F2}-{last.TotalSeconds:F2} s (RequestHeadersTimeout 2 s), {answered408} with a 408");
        output.WriteLine($"{served} normal requests served meanwhile ({servedWhileAllOpen} while every loris was open), slowest {maxLatency.TotalMilliseconds:F0} ms");
        output.WriteLine($"pool memory rented: peak +{peak / 1024} KiB over the {rentedBefore / 1024} KiB before ({peak / Lorises} B per loris), {(rentedAfter - rentedBefore) / 1024:+0;-0;+0} KiB after; held {pool.Held / 1024} KiB");

        Assert.All(lorises, l => Assert.InRange(l.ClosedAfter, TimeSpan.FromSeconds(1), s_closeBound));
        Assert.Equal(Lorises, answered408);
        Assert.True(servedWhileAllOpen > 0, "no normal request was served while the lorises were connected");
        Assert.True(maxLatency < TimeSpan.FromSeconds(10), $"a normal request took {maxLatency}");
        Assert.InRange(peak, 0, Lorises * 16L * 1024);
        Assert.InRange(rentedAfter - rentedBefore, long.MinValue, 64 * 1024);
    }

    [Fact]
    public async Task Trickling_request_bodies_are_cut_off_by_MinRequestBodyDataRate_while_uploads_are_served()
    {
        const int Tricklers = 50;
        await using TestServer server = await TestServer.StartAsync(Transport, App(new Gate()),
            o => o.Kestrel = k => k.Limits.MinRequestBodyDataRate = new MinDataRate(bytesPerSecond: 240, gracePeriod: TimeSpan.FromSeconds(2)));
        using var pool = new PoolMeter(server);
        await ServePlaintextAsync(server, close: true);
        long rentedBefore = pool.Rented;
        pool.ResetPeak();

        // The headers arrive at once; the body at 10 B/s.
        var clock = Stopwatch.StartNew();
        using var tricklers = new Peers();
        for (int i = 0; i < Tricklers; i++)
        {
            Peer peer = await Peer.ConnectAsync(server, clock);
            await RawClient.SendAsync(peer.Socket, "POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 100000\r\n\r\n");
            tricklers.Add(peer);
        }
        Task dribbling = DribbleAsync(tricklers, (byte)'b');
        const long UploadLength = (1 << 20) + 5;
        string uploaded;
        bool uploadedWhileAllOpen;
        using (HttpClient client = server.CreateClient()) // disposed before the wait for every connection to close
        {
            using HttpResponseMessage upload = await client.PostAsync("upload", Pattern.Content(UploadLength));
            uploaded = await upload.Content.ReadAsStringAsync();
            uploadedWhileAllOpen = tricklers.All(t => !t.IsClosed);
        }
        await Task.WhenAll(tricklers.Select(t => t.Closed)).WaitAsync(s_hangGuard);
        await dribbling;
        long peak = pool.PeakRented - rentedBefore;
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed.WaitAsync(s_hangGuard)));
        long rentedAfter = await SettledRentedAsync(pool, rentedBefore);

        TimeSpan first = tricklers.Min(l => l.ClosedAfter), last = tricklers.Max(l => l.ClosedAfter);
        int answered408 = tricklers.Count(l => l.Received.StartsWith("HTTP/1.1 408 ", StringComparison.Ordinal));
        output.WriteLine($"{Transport}: {Tricklers} trickling bodies closed after {first.TotalSeconds:F2}-{last.TotalSeconds:F2} s (240 B/s, 2 s grace), {answered408} with a 408");
        output.WriteLine($"pool memory rented: peak +{peak / 1024} KiB over the {rentedBefore / 1024} KiB before ({peak / Tricklers} B per trickler), {(rentedAfter - rentedBefore) / 1024:+0;-0;+0} KiB after; held {pool.Held / 1024} KiB");

        Assert.Equal(TestApp.Describe(UploadLength), uploaded);
        Assert.True(uploadedWhileAllOpen, "the upload finished only after a trickler was cut off");
        Assert.All(tricklers, t => Assert.InRange(t.ClosedAfter, TimeSpan.FromSeconds(1), s_closeBound));
        Assert.Equal(Tricklers, answered408);
        Assert.InRange(peak, 0, Tricklers * 16L * 1024 + (1 << 20) + 512 * 1024); // + the upload's read buffer (1 MiB) and a burst
        Assert.InRange(rentedAfter - rentedBefore, long.MinValue, 64 * 1024);
    }

    [Fact]
    public async Task Huge_bodies_the_app_never_reads_stay_within_MaxReadBufferSize()
    {
        const int Senders = 16;
        const long MaxReadBufferSize = 64 * 1024;
        var gate = new Gate();
        await using TestServer server = await TestServer.StartAsync(Transport, App(gate),
            o => { o.MaxReadBufferSize = MaxReadBufferSize; o.ShutdownTimeout = TimeSpan.FromSeconds(2); });
        using var pool = new PoolMeter(server);
        await ServePlaintextAsync(server, close: true);
        long rentedBefore = pool.Rented;
        pool.ResetPeak();
        var clock = Stopwatch.StartNew();
        var senders = new List<Peer>();
        try
        {
            for (int i = 0; i < Senders; i++)
            {
                Peer peer = await Peer.ConnectAsync(server, clock);
                await RawClient.SendAsync(peer.Socket, "POST /hold HTTP/1.1\r\nHost: test\r\nContent-Length: 1099511627776\r\n\r\n");
                senders.Add(peer);
            }
            await WaitUntilAsync(() => gate.Started == Senders, "not every request reached the app");

            // Push until TCP pushes back: a send that makes no progress for a second.
            long[] sent = await Task.WhenAll(senders.Select(s => SendUntilStalledAsync(s.Socket)));
            await Task.Delay(TimeSpan.FromSeconds(1)); // whatever was still on its way lands
            long peak = pool.PeakRented - rentedBefore;
            long rentedStalled = pool.Rented - rentedBefore;

            output.WriteLine($"{Transport}: {Senders} connections, MaxReadBufferSize {MaxReadBufferSize / 1024} KiB, app not reading; clients sent {sent.Min() / 1024}-{sent.Max() / 1024} KiB each before TCP stopped them");
            output.WriteLine($"pool memory rented: peak +{peak / 1024} KiB ({peak / Senders / 1024} KiB per connection), +{rentedStalled / 1024} KiB while stalled; held {pool.Held / 1024} KiB");

            Assert.All(sent, s => Assert.True(s > MaxReadBufferSize, $"a client could send only {s} bytes"));
            // Sockets stops at MaxReadBufferSize (its last receive fills at most one block). io_uring arms each receive
            // for what the input can still take (a capped multishot receive, or a single-shot one of that length where
            // the kernel cannot cap one), so it holds at most one 8 KiB ring buffer more (Input keeps the ring buffers
            // themselves, each at least half full).
            const long excess = 16 * 1024;
            Assert.InRange(peak, Senders * MaxReadBufferSize / 2, Senders * (MaxReadBufferSize + excess));
        }
        finally
        {
            foreach (Peer peer in senders)
            {
                RawClient.Reset(peer.Socket);
            }
            gate.Release.TrySetResult();
        }
    }

    /// <summary>Slow peers; disposing closes their sockets (left to the finalizer, they would close during a later fd-counting test).</summary>
    private sealed class Peers : List<Peer>, IDisposable
    {
        public void Dispose()
        {
            foreach (Peer peer in this)
            {
                peer.Socket.Dispose();
            }
        }
    }

    /// <summary>A raw connection and what it received until the server closed it.</summary>
    private sealed class Peer
    {
        private readonly StringBuilder _received = new();
        private readonly TimeSpan _connectedAt;
        private readonly Stopwatch _clock;
        private TimeSpan _closedAt;

        private Peer(Socket socket, Stopwatch clock)
        {
            Socket = socket;
            _clock = clock;
            _connectedAt = clock.Elapsed;
            Closed = ReadUntilClosedAsync();
        }

        public Socket Socket { get; }

        public Task Closed { get; }

        public bool IsClosed => Closed.IsCompleted;

        public string Received => _received.ToString();

        public TimeSpan ClosedAfter => _closedAt - _connectedAt;

        public static async Task<Peer> ConnectAsync(TestServer server, Stopwatch clock) => new(await server.ConnectAsync(), clock);

        private async Task ReadUntilClosedAsync()
        {
            byte[] buffer = new byte[4096];
            try
            {
                int n;
                while ((n = await Socket.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard)) > 0)
                {
                    _received.Append(Encoding.Latin1.GetString(buffer, 0, n));
                }
            }
            catch (SocketException)
            {
                // a reset ends it too
            }
            _closedAt = _clock.Elapsed;
        }
    }

    /// <summary>One byte every 100 ms to every peer still open.</summary>
    private static async Task DribbleAsync(List<Peer> peers, byte value)
    {
        byte[] one = [value];
        var clock = Stopwatch.StartNew();
        while (peers.Any(p => !p.IsClosed))
        {
            Assert.True(clock.Elapsed < s_hangGuard, "the server never closed the slow peers");
            foreach (Peer peer in peers.Where(p => !p.IsClosed))
            {
                try
                {
                    await peer.Socket.SendAsync(one.AsMemory());
                }
                catch (SocketException)
                {
                    // closed under us: its reader sees it
                }
            }
            await Task.Delay(s_dribble);
        }
    }

    /// <summary>Normal requests, one connection each, until every slow peer is closed.</summary>
    private static async Task<(int Served, int ServedWhileAllOpen, TimeSpan MaxLatency)> ServeUntilAsync(TestServer server, List<Peer> slow)
    {
        int served = 0, servedWhileAllOpen = 0;
        TimeSpan max = TimeSpan.Zero;
        do
        {
            bool allOpen = slow.All(p => !p.IsClosed);
            var latency = Stopwatch.StartNew();
            await ServePlaintextAsync(server, close: true);
            max = latency.Elapsed > max ? latency.Elapsed : max;
            served++;
            if (allOpen && slow.All(p => !p.IsClosed))
            {
                servedWhileAllOpen++;
            }
            await Task.Delay(50);
        }
        while (slow.Any(p => !p.IsClosed));
        return (served, servedWhileAllOpen, max);
    }

    private static async Task ServePlaintextAsync(TestServer server, bool close)
    {
        using Socket socket = await server.ConnectAsync();
        await RawClient.SendAsync(socket, $"GET /plaintext HTTP/1.1\r\nHost: test\r\n{(close ? "Connection: close\r\n" : "")}\r\n");
        string response = await RawClient.ReceiveUntilAsync(socket, t => t.Contains("Hello, World!", StringComparison.Ordinal));
        Assert.StartsWith("HTTP/1.1 200 OK", response);
    }

    private static async Task<long> SendUntilStalledAsync(Socket socket)
    {
        byte[] chunk = new byte[64 * 1024];
        long sent = 0;
        while (true)
        {
            Task<int> send = socket.SendAsync(chunk.AsMemory()).AsTask();
            if (await Task.WhenAny(send, Task.Delay(TimeSpan.FromSeconds(1))) != send)
            {
                return sent; // the send stays pending; the reset in the test's finally ends it
            }
            sent += await send;
            Assert.True(sent < 1L << 30, "a GiB went through to an app that does not read");
        }
    }

    /// <summary>Rented bytes once they settle (buffers return to the pool as connections finish closing).</summary>
    private static async Task<long> SettledRentedAsync(PoolMeter pool, long before)
    {
        for (int i = 0; i < 250 && pool.Rented > before + 64 * 1024; i++)
        {
            await Task.Delay(20);
        }
        return pool.Rented;
    }

    private static async Task WaitUntilAsync(Func<bool> condition, string failure)
    {
        var clock = Stopwatch.StartNew();
        while (!condition())
        {
            Assert.True(clock.Elapsed < s_hangGuard, failure);
            await Task.Delay(20);
        }
    }
}

public sealed class SocketsSlowPeerTests(ITestOutputHelper output) : SlowPeerTests(output)
{
    protected override TransportKind Transport => TransportKind.Sockets;
}

public sealed class IoUringSlowPeerTests(ITestOutputHelper output) : SlowPeerTests(output)
{
    protected override TransportKind Transport => TransportKind.IoUring;
}
