using System.Buffers.Binary;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Security.Cryptography;
using System.Text;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Buffers;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// Zero-copy responses through Kestrel: connections write into their loop's registered pool and large sends go
/// SEND_ZC from fixed buffers, each block pinned until the kernel's notification. Loopback always copies, so the test
/// seams keep zero-copy on (IgnoreZeroCopyCopied) and poison every block returned to the pool (0xDB): a block reused
/// while the kernel still reads it arrives at the client as wrong bytes. Downloads are verified byte for byte, and
/// every pinned block must come back, after complete responses, client resets and server aborts alike.
/// </summary>
public sealed class KestrelZeroCopyTests(ITestOutputHelper output)
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);
    private const int Connections = 8;
    private const long DownloadLength = 25L << 20;

    /// <summary>Signals from the app's side.</summary>
    private sealed class Probe
    {
        /// <summary>How the app's /random endpoint ended: null when it wrote everything it meant to.</summary>
        public TaskCompletionSource<Exception?> Ended { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);

        /// <summary>Set by a test: the running /random request aborts its connection.</summary>
        public TaskCompletionSource AbortNow { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    private static Action<WebApplication> App(Probe probe) => app =>
    {
        // A body of `length` pseudo-random bytes from `seed`, with that Content-Length. With `abortAt`, the app writes
        // that many bytes (or until the test says AbortNow) and then aborts the connection (HttpContext.Abort).
        app.MapGet("/random", async (HttpContext context, long seed, long length, long? abortAt) =>
        {
            context.Response.ContentLength = length;
            context.Response.ContentType = "application/octet-stream";
            try
            {
                if (abortAt is not { } limit)
                {
                    await WriteRandomAsync(context.Response, seed, length, context.RequestAborted);
                }
                else
                {
                    Task writing = WriteRandomAsync(context.Response, seed, limit, context.RequestAborted);
                    await Task.WhenAny(writing, probe.AbortNow.Task);
                    context.Abort();
                    try
                    {
                        await writing;
                    }
                    catch (OperationCanceledException)
                    {
                        // the abort cancelled RequestAborted under the pending write
                    }
                }
                probe.Ended.TrySetResult(null);
            }
            catch (Exception ex)
            {
                probe.Ended.TrySetResult(ex); // the client went away: not an application error
            }
        });
    };

    /// <summary>
    /// Writes the body in chunks of 64 KiB to 1 MiB (sizes from the seed), in one of three ways by seed: PipeWriter.WriteAsync
    /// of a copy, Stream.WriteAsync of a copy, or straight into the pipe's own blocks (GetSpan/Advance) and a flush.
    /// </summary>
    private static async Task WriteRandomAsync(HttpResponse response, long seed, long length, CancellationToken cancellationToken)
    {
        PipeWriter writer = response.BodyWriter;
        int style = (int)(seed % 3);
        byte[] chunk = style < 2 ? new byte[RandomBody.MaxChunk] : [];
        long offset = 0;
        for (int index = 0; offset < length; index++)
        {
            // Once Kestrel has given up on the response, writes become no-ops: stop on the token, not on a failed write.
            cancellationToken.ThrowIfCancellationRequested();
            int size = (int)Math.Min(RandomBody.ChunkSize(seed, index), length - offset);
            FlushResult flush;
            switch (style)
            {
                case 0:
                    RandomBody.Fill(seed, offset, chunk.AsSpan(0, size));
                    flush = await writer.WriteAsync(chunk.AsMemory(0, size), cancellationToken);
                    break;
                case 1:
                    RandomBody.Fill(seed, offset, chunk.AsSpan(0, size));
                    await response.Body.WriteAsync(chunk.AsMemory(0, size), cancellationToken);
                    flush = default;
                    break;
                default:
                    for (int done = 0; done < size;)
                    {
                        Span<byte> span = writer.GetSpan();
                        int count = Math.Min(span.Length, size - done);
                        RandomBody.Fill(seed, offset + done, span[..count]);
                        writer.Advance(count);
                        done += count;
                    }
                    flush = await writer.FlushAsync(cancellationToken);
                    break;
            }
            offset += size;
            if (flush.IsCompleted || flush.IsCanceled)
            {
                return;
            }
        }
    }

    [Fact]
    public async Task Large_downloads_sent_zero_copy_from_registered_blocks_arrive_intact_and_every_pinned_block_comes_back()
    {
        var probe = new Probe();
        await using TestServer server = await StartAsync(probe, loopPools: true);
        IoUringNetwork network = Network(server);
        int blocksBefore = network.RentedMemoryBlocks;
        EventLoopCounters before = Totals(network);
        var clock = Stopwatch.StartNew();

        Download[] downloads;
        int blocksIdle;
        using (HttpClient client = server.CreateClient())
        {
            downloads = await Task.WhenAll(Enumerable.Range(1, Connections).Select(seed => DownloadAsync(client, seed, DownloadLength)));
            TimeSpan took = clock.Elapsed;
            int peak = network.Loops.Sum(l => l.MemoryPoolIfCreated?.PeakRentedBlocks ?? 0);

            // The connections stay open (keep-alive): the notifications alone must give every pinned block back.
            await Eventually.HoldsAsync(() => network.RentedMemoryBlocks == blocksBefore && NotificationsPending(network) == 0);
            blocksIdle = network.RentedMemoryBlocks;
            EventLoopCounters sent = Delta(Totals(network), before);
            output.WriteLine($"{Connections} x {DownloadLength >> 20} MiB in {took.TotalSeconds:F2} s; {sent.BytesSent >> 20} MiB sent, zero-copy sends {sent.ZeroCopySends} (fixed {sent.ZeroCopySendsFixed}, reported copied {sent.ZeroCopySendsCopied})");
            output.WriteLine($"pool blocks rented: {blocksBefore} before, peak {peak}, {blocksIdle} with the connections idle; registered regions {string.Join(", ", network.Loops.Select(l => l.BufferTable?.Registered))}");

            Assert.All(downloads, d => Assert.True(d.IsIntact(DownloadLength), d.Describe()));
            Assert.Equal(Connections, server.Connections.All.Count); // the downloads ran on as many connections
            Assert.All(server.Connections.All, c => Assert.Equal(typeof(PinnedBlockMemoryPool).FullName, c.MemoryPoolType));
            Assert.InRange(sent.BytesSent, Connections * DownloadLength, Connections * (DownloadLength + 4096));
            // Hundreds of sends per connection, most from fixed buffers: zero-copy stayed on over loopback (without the
            // seam each connection reverts after its first notification).
            Assert.InRange(sent.ZeroCopySends, Connections * 16L, long.MaxValue);
            // From fixed buffers: the responses' sends gather several blocks, which the kernel takes from the table only
            // since 6.15 (SENDMSG_ZC with FIXED_BUF); before, one unfixed gather is sent rather than one fixed block (6.1
            // under qemu: 970 zero-copy sends, none fixed).
            Assert.InRange(sent.ZeroCopySendsFixed, IoUringCapabilities.Current.HasZeroCopySendMsgFixed ? 1L : 0L, sent.ZeroCopySends);
            Assert.True(peak > blocksBefore, "the downloads rented no block from the loops' pools");
            Assert.Equal(blocksBefore, blocksIdle);
        }

        await Task.WhenAll(server.Connections.All.Select(c => c.Closed.WaitAsync(s_hangGuard)));
        await Eventually.HoldsAsync(() => network.RentedMemoryBlocks == blocksBefore);
        Assert.Equal(blocksBefore, network.RentedMemoryBlocks);
        Assert.Equal(0, Totals(network).HandlerExceptions - before.HandlerExceptions);
        AssertNoErrorsLogged(server);
    }

    [Fact]
    public async Task Client_that_stops_reading_and_resets_mid_body_gets_its_pinned_blocks_returned()
    {
        var probe = new Probe();
        await using TestServer server = await StartAsync(probe, loopPools: true);
        IoUringNetwork network = Network(server);
        int blocksBefore = network.RentedMemoryBlocks;
        EventLoopCounters before = Totals(network);
        const long Seed = 1001; // WriteAsync of a copy

        using Socket socket = await ConnectSmallWindowAsync(server);
        await RawClient.SendAsync(socket, $"GET /random?seed={Seed}&length={1L << 40} HTTP/1.1\r\nHost: test\r\n\r\n");
        var body = new Download(Seed);
        await ReadResponseAsync(socket, body, 1 << 20); // the headers and 1 MiB, then stop reading
        long sentStalled = await WaitForSendStallAsync(network);
        int blocksStalled = network.RentedMemoryBlocks;
        int notificationsStalled = NotificationsPending(network);
        EventLoopCounters stalled = Delta(Totals(network), before);
        ConnectionTracker.Tracked connection = server.Connections.All.Single();

        RawClient.Reset(socket);

        await connection.Closed.WaitAsync(s_hangGuard);
        Exception? ended = await probe.Ended.Task.WaitAsync(s_hangGuard);
        await Eventually.HoldsAsync(() => network.RentedMemoryBlocks == blocksBefore && NotificationsPending(network) == 0);
        output.WriteLine($"client read {body.Length >> 10} KiB then stopped; the server's sends stalled at {sentStalled >> 10} KiB after {stalled.ZeroCopySends} zero-copy sends ({stalled.ZeroCopySendsFixed} fixed)");
        output.WriteLine($"while stalled: {blocksStalled} blocks rented ({blocksBefore} before), {notificationsStalled} notifications pending; after the reset: {network.RentedMemoryBlocks} blocks, {NotificationsPending(network)} pending; the app's write ended with {ended?.GetType().Name ?? "no exception"}");

        Assert.True(body.IsIntactPrefix, body.Describe());
        Assert.True(stalled.ZeroCopySends > 0, "no zero-copy send before the stall");
        Assert.True(notificationsStalled > 0, "no zero-copy send held its blocks while the client did not read: nothing for the reset to release");
        Assert.True(blocksStalled > blocksBefore);
        // Held as on copying sends: Kestrel's MaxResponseBufferSize (64 KiB) plus the write that crossed it, zero-copy
        // sends' bytes counted until their notifications (not the socket buffer's worth of pinned blocks).
        int blockBytes = ((PinnedBlockMemoryPool)network.Loops[0].MemoryPool).BlockBytes;
        int bound = (64 * 1024 + RandomBody.MaxChunk) / blockBytes + 2; // + the response head's block, + one both sent and unsent
        Assert.True(blocksStalled - blocksBefore <= bound, $"{blocksStalled - blocksBefore} blocks held for a client that stopped reading (bound {bound})");
        Assert.Equal(0, NotificationsPending(network));
        Assert.Equal(blocksBefore, network.RentedMemoryBlocks);
        Assert.Equal(0, Totals(network).HandlerExceptions - before.HandlerExceptions);
        AssertNoErrorsLogged(server);
        // Logged as a reset, as Kestrel's Sockets transport logs it, although the failing send may have taken the
        // socket's one reset error and left the receive an end of stream.
        Assert.Contains(server.Logs.Where(Internal.IoUringTransportLog.Category, eventId: 19), r => r.Message.Contains(connection.Id, StringComparison.Ordinal));
        Assert.DoesNotContain(server.Logs.Where(Internal.IoUringTransportLog.Category, eventId: 6), r => r.Message.Contains(connection.Id, StringComparison.Ordinal));
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Server_abort_mid_body_truncates_the_response_and_gets_its_pinned_blocks_returned(bool clientReading)
    {
        // Reading: the app writes 8 MiB of a 64 MiB body and aborts while the client keeps up. Not reading: the client
        // stops after 1 MiB and the app aborts once the server's sends have stalled, its socket queue full of
        // zero-copy sends waiting for their notifications; the client reads again only once the connection closed.
        var probe = new Probe();
        await using TestServer server = await StartAsync(probe, loopPools: true);
        IoUringNetwork network = Network(server);
        int blocksBefore = network.RentedMemoryBlocks;
        EventLoopCounters before = Totals(network);
        const long Length = 64L << 20;
        const long AbortAt = 8L << 20;
        long seed = clientReading ? 2002 : 2003; // straight into the pipe's blocks; Stream.WriteAsync of a copy

        Download body;
        int notificationsAtAbort = -1;
        string ending;
        if (clientReading)
        {
            using HttpClient client = server.CreateClient();
            body = new Download(seed);
            IOException error = await Assert.ThrowsAnyAsync<IOException>(() => DownloadIntoAsync(client, body, Length, $"random?seed={seed}&length={Length}&abortAt={AbortAt}"));
            ending = $"{error.GetType().Name}: {error.Message}";
        }
        else
        {
            using Socket socket = await ConnectSmallWindowAsync(server);
            await RawClient.SendAsync(socket, $"GET /random?seed={seed}&length={Length}&abortAt={Length} HTTP/1.1\r\nHost: test\r\n\r\n");
            body = new Download(seed);
            await ReadResponseAsync(socket, body, 1 << 20);
            await WaitForSendStallAsync(network);
            notificationsAtAbort = NotificationsPending(network);

            probe.AbortNow.TrySetResult();
            await server.Connections.All.Single().Closed.WaitAsync(s_hangGuard); // closed with its sends still queued

            ending = await ReadResponseAsync(socket, body, long.MaxValue); // the rest, until the server ends it
        }
        await server.Connections.All.Single().Closed.WaitAsync(s_hangGuard);
        Exception? ended = await probe.Ended.Task.WaitAsync(s_hangGuard);
        await Eventually.HoldsAsync(() => network.RentedMemoryBlocks == blocksBefore && NotificationsPending(network) == 0);
        EventLoopCounters sent = Delta(Totals(network), before);
        output.WriteLine($"client {(clientReading ? "reading" : "not reading")}: {body.Length >> 10} KiB of {Length >> 10} KiB received, ended by {ending}; the app's write ended with {ended?.GetType().Name ?? "no exception"}");
        output.WriteLine($"server sent {sent.BytesSent >> 10} KiB in {sent.ZeroCopySends} zero-copy sends ({sent.ZeroCopySendsFixed} fixed); notifications pending at the abort {notificationsAtAbort}; blocks {blocksBefore} before, {network.RentedMemoryBlocks} after");

        Assert.True(body.IsIntactPrefix, body.Describe());
        Assert.InRange(body.Length, 0L, clientReading ? AbortAt : Length - 1); // truncated
        Assert.True(sent.ZeroCopySends > 0, "no zero-copy send");
        if (!clientReading)
        {
            Assert.True(notificationsAtAbort > 0, "no zero-copy send held its blocks at the abort: nothing for the close to release");
            Assert.Null(ended); // the app's abort ended its write, not the client
        }
        Assert.Equal(0, NotificationsPending(network));
        Assert.Equal(blocksBefore, network.RentedMemoryBlocks);
        Assert.Equal(0, sent.HandlerExceptions);
        AssertNoErrorsLogged(server);
    }

    [Fact]
    public async Task Large_downloads_from_kestrels_pool_arrive_intact_with_plain_sends()
    {
        var probe = new Probe();
        await using TestServer server = await StartAsync(probe, loopPools: false);
        IoUringNetwork network = Network(server);
        EventLoopCounters before = Totals(network);
        var clock = Stopwatch.StartNew();

        Download[] downloads;
        using (HttpClient client = server.CreateClient())
        {
            downloads = await Task.WhenAll(Enumerable.Range(1, Connections).Select(seed => DownloadAsync(client, seed, DownloadLength)));
        }
        EventLoopCounters sent = Delta(Totals(network), before);
        output.WriteLine($"{Connections} x {DownloadLength >> 20} MiB in {clock.Elapsed.TotalSeconds:F2} s; {sent.BytesSent >> 20} MiB sent, zero-copy sends {sent.ZeroCopySends}");

        Assert.All(downloads, d => Assert.True(d.IsIntact(DownloadLength), d.Describe()));
        Assert.Equal(Connections, server.Connections.All.Count);
        Assert.All(server.Connections.All, c => Assert.StartsWith("Microsoft.AspNetCore.", c.MemoryPoolType));
        Assert.InRange(sent.BytesSent, Connections * DownloadLength, Connections * (DownloadLength + 4096));
        Assert.Equal(0, sent.ZeroCopySends);
        Assert.Equal(0, sent.ZeroCopySendsFixed);
        Assert.Equal(-1, network.RentedMemoryBlocks); // the loops' pools are not the connections'
        await Task.WhenAll(server.Connections.All.Select(c => c.Closed.WaitAsync(s_hangGuard)));
        AssertNoErrorsLogged(server);
    }

    private static Task<TestServer> StartAsync(Probe probe, bool loopPools) => TestServer.StartAsync(TransportKind.IoUring, App(probe), o =>
    {
        o.ShutdownTimeout = TimeSpan.FromSeconds(2);
        o.IoUring = u =>
        {
            u.UseLoopMemoryPools = loopPools;
            u.ZeroCopySendThreshold = 16 * 1024;
            u.ConfigureNetworkForTesting = n => n.Loop.Hooks = new IoUring.Testing.TestHooks { IgnoreZeroCopyCopied = true, PoisonReturnedMemory = true };
        };
    });

    private static IoUringNetwork Network(TestServer server)
        => ((IoUringTransportFactory)server.App.Services.GetServices<IConnectionListenerFactory>().Last()).Network!;

    private static EventLoopCounters Totals(IoUringNetwork network) => network.Loops.Aggregate(default(EventLoopCounters), (sum, loop) => sum + loop.Counters);

    private static EventLoopCounters Delta(EventLoopCounters now, EventLoopCounters before) => now + new EventLoopCounters
    {
        BytesSent = -before.BytesSent,
        ZeroCopySends = -before.ZeroCopySends,
        ZeroCopySendsFixed = -before.ZeroCopySendsFixed,
        ZeroCopySendsCopied = -before.ZeroCopySendsCopied,
        HandlerExceptions = -before.HandlerExceptions,
    };

    private static int NotificationsPending(IoUringNetwork network) => network.Loops.Sum(l => l.NotificationsPending);

    /// <summary>Polls for up to 10 s (closes and notifications complete asynchronously); the caller asserts afterwards.</summary>
    /// <summary>Waits until the loops' BytesSent has not moved for 300 ms: the client's window and the server's socket buffer are full.</summary>
    private static async Task<long> WaitForSendStallAsync(IoUringNetwork network)
    {
        long last = Totals(network).BytesSent;
        var total = Stopwatch.StartNew();
        for (var still = Stopwatch.StartNew(); still.Elapsed < TimeSpan.FromMilliseconds(300);)
        {
            await Task.Delay(25);
            long now = Totals(network).BytesSent;
            if (now != last)
            {
                last = now;
                still.Restart();
            }
            Assert.True(total.Elapsed < TimeSpan.FromSeconds(20), $"the server kept sending ({last} bytes) to a client that stopped reading");
        }
        return last;
    }

    private static void AssertNoErrorsLogged(TestServer server)
    {
        List<TestLogs.LogRecord> bad = server.Logs.Records
            .Where(r => r.Level >= LogLevel.Error || (r.Level >= LogLevel.Warning && r.Category.StartsWith("IoUring", StringComparison.Ordinal)))
            .ToList();
        Assert.True(bad.Count == 0, string.Join(Environment.NewLine, bad.Select(r => $"{r.Level} {r.Category} {r.EventId}: {r.Message} {r.Exception}")));
    }

    /// <summary>A raw client with a 16 KiB receive buffer (set before connecting, so the window it offers stays small).</summary>
    private static async Task<Socket> ConnectSmallWindowAsync(TestServer server)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true, ReceiveBufferSize = 16 * 1024 };
        await socket.ConnectAsync(server.EndPoint).WaitAsync(s_hangGuard);
        return socket;
    }

    /// <summary>
    /// Reads the response head, then body bytes into <paramref name="body"/> until it holds at least <paramref name="atLeast"/>
    /// or the server ends the connection; returns how the read ended ("more", "EOF" or the socket error).
    /// </summary>
    private static async Task<string> ReadResponseAsync(Socket socket, Download body, long atLeast)
    {
        byte[] buffer = new byte[1 << 16];
        try
        {
            while (body.Length < atLeast)
            {
                int n = await socket.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard);
                if (n == 0)
                {
                    return "EOF";
                }
                body.AppendResponse(buffer.AsSpan(0, n));
            }
            return "more";
        }
        catch (SocketException ex)
        {
            return ex.SocketErrorCode.ToString();
        }
    }

    private static async Task<Download> DownloadAsync(HttpClient client, long seed, long length)
    {
        var download = new Download(seed);
        await DownloadIntoAsync(client, download, length, $"random?seed={seed}&length={length}");
        return download;
    }

    private static async Task DownloadIntoAsync(HttpClient client, Download download, long length, string uri)
    {
        using HttpResponseMessage response = await client.GetAsync(uri, HttpCompletionOption.ResponseHeadersRead);
        response.EnsureSuccessStatusCode();
        Assert.Equal(length, response.Content.Headers.ContentLength);
        await using Stream stream = await response.Content.ReadAsStreamAsync();
        byte[] buffer = new byte[1 << 18];
        int n;
        while ((n = await stream.ReadAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard)) > 0)
        {
            download.Append(buffer.AsSpan(0, n));
        }
    }

    /// <summary>
    /// A body as received: its SHA-256 next to that of the expected bytes (<see cref="RandomBody"/> of the seed, as long
    /// as what arrived), and where it first differed, with how many wrong bytes were the pool's poison.
    /// </summary>
    private sealed class Download(long seed)
    {
        private readonly IncrementalHash _received = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        private readonly IncrementalHash _expected = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        private byte[] _scratch = [];
        private readonly List<byte> _head = [];
        private bool _inBody;
        private string? _receivedHash, _expectedHash;

        public long Seed { get; } = seed;

        public long Length { get; private set; }

        public long FirstMismatch { get; private set; } = -1;

        public long WrongBytes { get; private set; }

        public long PoisonBytes { get; private set; }

        public string ResponseHead { get; private set; } = "";

        public bool IsIntactPrefix => Hashes().Received == Hashes().Expected && FirstMismatch < 0;

        public bool IsIntact(long length) => Length == length && IsIntactPrefix;

        /// <summary>Raw bytes of an HTTP/1.1 response: the head is kept apart, the rest is body.</summary>
        public void AppendResponse(ReadOnlySpan<byte> data)
        {
            if (!_inBody)
            {
                int used = 0;
                while (used < data.Length && !_inBody)
                {
                    _head.Add(data[used++]);
                    if (_head.Count >= 4 && _head[^4] == '\r' && _head[^3] == '\n' && _head[^2] == '\r' && _head[^1] == '\n')
                    {
                        ResponseHead = Encoding.Latin1.GetString([.. _head]);
                        Assert.StartsWith("HTTP/1.1 200 OK", ResponseHead);
                        _inBody = true;
                    }
                }
                data = data[used..];
            }
            if (_inBody && !data.IsEmpty)
            {
                Append(data);
            }
        }

        public void Append(ReadOnlySpan<byte> data)
        {
            if (_scratch.Length < data.Length)
            {
                _scratch = new byte[data.Length];
            }
            Span<byte> expected = _scratch.AsSpan(0, data.Length);
            RandomBody.Fill(Seed, Length, expected);
            _received.AppendData(data);
            _expected.AppendData(expected);
            if (!data.SequenceEqual(expected))
            {
                for (int i = 0; i < data.Length; i++)
                {
                    if (data[i] != expected[i])
                    {
                        FirstMismatch = FirstMismatch < 0 ? Length + i : FirstMismatch;
                        WrongBytes++;
                        PoisonBytes += data[i] == PinnedBlockMemoryPool.PoisonByte ? 1 : 0;
                    }
                }
            }
            Length += data.Length;
        }

        private (string Received, string Expected) Hashes()
        {
            _receivedHash ??= Convert.ToHexStringLower(_received.GetHashAndReset());
            _expectedHash ??= Convert.ToHexStringLower(_expected.GetHashAndReset());
            return (_receivedHash, _expectedHash);
        }

        public string Describe() => $"seed {Seed}: {Length} bytes, sha256 {Hashes().Received} (expected {Hashes().Expected}); "
            + (FirstMismatch < 0 ? "no byte differs" : $"first wrong byte at {FirstMismatch}, {WrongBytes} wrong, {PoisonBytes} of them the pool's poison 0x{PinnedBlockMemoryPool.PoisonByte:X2}");
    }

    /// <summary>
    /// Deterministic pseudo-random bytes addressable at any offset: SplitMix64 of (seed, offset / 8), little-endian. Any
    /// chunking of a body writes and checks the same bytes, and a wrong byte is found at its offset.
    /// </summary>
    private static class RandomBody
    {
        public const int MinChunk = 64 * 1024;
        public const int MaxChunk = 1024 * 1024;

        /// <summary>The size of the <paramref name="index"/>th chunk the app writes: 64 KiB to 1 MiB, mostly not a multiple of anything.</summary>
        public static int ChunkSize(long seed, int index) => MinChunk + (int)(Word(~seed, index) % (MaxChunk - MinChunk + 1));

        public static void Fill(long seed, long offset, Span<byte> destination)
        {
            while (!destination.IsEmpty && (offset & 7) != 0)
            {
                destination[0] = (byte)(Word(seed, offset >> 3) >> (int)((offset & 7) * 8));
                destination = destination[1..];
                offset++;
            }
            int words = destination.Length / 8;
            Span<ulong> whole = MemoryMarshal.Cast<byte, ulong>(destination[..(words * 8)]);
            long first = offset >> 3;
            for (int i = 0; i < whole.Length; i++)
            {
                ulong word = Word(seed, first + i);
                whole[i] = BitConverter.IsLittleEndian ? word : BinaryPrimitives.ReverseEndianness(word);
            }
            destination = destination[(words * 8)..];
            offset += words * 8L;
            for (int i = 0; i < destination.Length; i++)
            {
                destination[i] = (byte)(Word(seed, offset >> 3) >> (i * 8));
            }
        }

        private static ulong Word(long seed, long index)
        {
            ulong z = (ulong)seed * 0xD1B54A32D192ED03UL + (ulong)index * 0x9E3779B97F4A7C15UL;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
            return z ^ (z >> 31);
        }
    }
}
