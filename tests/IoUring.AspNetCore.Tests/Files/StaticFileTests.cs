using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Loops;
using IoUring.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.FileProviders;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Files;

/// <summary>
/// Files served through StaticFileMiddleware and Results.File (Kestrel's SendFileAsync): with UseIoUring() a file
/// larger than one 64 KiB read is read on the connection's loop (the loops' file-read counters show every byte), and what the client gets is exactly
/// what Kestrel's Sockets transport sends: sizes around the chunk and block edges, HTTP/1.1, h2c and TLS h2, ranges, a
/// file truncated or deleted while it is sent, a client that aborts or stops reading, 200 downloads at once, and the
/// option switched off. After each, no fd of the test's files is left open.
/// </summary>
public sealed class StaticFileTests(ITestOutputHelper output) : IDisposable
{
    private const int Chunk = 64 * 1024; // LoopResponseBodyFeature.ChunkSize
    private static readonly int[] s_sizes = [0, 1, 4095, 4097, Chunk - 1, Chunk + 1, 3 * 1024 * 1024 + 5];
    private const int LargeSize = 64 * 1024 * 1024;

    private readonly string _root = Directory.CreateTempSubdirectory("iouring-static-").FullName;

    public void Dispose() => Directory.Delete(_root, recursive: true);

    public static TheoryData<TransportKind, string> TransportsAndProtocols()
    {
        var data = new TheoryData<TransportKind, string>();
        foreach (TransportKind kind in new[] { TransportKind.Sockets, TransportKind.IoUring })
        {
            foreach (string protocol in new[] { "http1", "h2c", "tls-h2" })
            {
                data.Add(kind, protocol);
            }
        }
        return data;
    }

    [Theory]
    [MemberData(nameof(TransportsAndProtocols))]
    public async Task Every_size_arrives_intact_through_static_files_and_results_file(TransportKind kind, string protocol)
    {
        var files = s_sizes.Select(size => (Name: $"f{size}.bin", Hash: WriteFile($"f{size}.bin", size))).ToList();
        files.Add(($"large.bin", WriteFile("large.bin", LargeSize)));
        // Ranges of one read (64 KiB) or less go through Kestrel's own copy (measured cheaper): the rest is read on
        // the loops.
        long total = 2 * (s_sizes.Where(s => s > Chunk).Sum(s => (long)s) + LargeSize);

        await using TestServer server = await StartAsync(kind, protocol);
        EventLoopCounters before = Totals(server);
        using HttpClient client = server.CreateClient(http2: protocol != "http1");
        foreach ((string name, byte[] hash) in files)
        {
            foreach (string url in new[] { $"static/{name}", $"file/{name}" })
            {
                using HttpResponseMessage response = await client.GetAsync(url, HttpCompletionOption.ResponseHeadersRead);
                Assert.Equal(HttpStatusCode.OK, response.StatusCode);
                Assert.Equal(protocol == "http1" ? HttpVersion.Version11 : HttpVersion.Version20, response.Version);
                byte[] body = await response.Content.ReadAsByteArrayAsync();
                Assert.Equal(new FileInfo(Path.Combine(_root, name)).Length, body.Length);
                Assert.Equal(hash, SHA256.HashData(body));
            }
        }
        AssertReadOnLoops(server, before, total);
        await AssertNoFileOpenAsync();
    }

    [Theory]
    [InlineData(TransportKind.Sockets, "http1")]
    [InlineData(TransportKind.IoUring, "http1")]
    [InlineData(TransportKind.IoUring, "tls-h2")]
    public async Task SendFileAsync_without_a_length_goes_chunked_with_offset_and_count(TransportKind kind, string protocol)
    {
        byte[] hash = WriteFile("u.bin", 5 * 1024 * 1024);
        byte[] content = File.ReadAllBytes(Path.Combine(_root, "u.bin"));
        await using TestServer server = await StartAsync(kind, protocol);
        EventLoopCounters before = Totals(server);
        using HttpClient client = server.CreateClient(http2: protocol != "http1");
        using (HttpResponseMessage whole = await client.GetAsync("sendfile/u.bin"))
        {
            Assert.Equal(protocol == "http1", whole.Headers.TransferEncodingChunked == true);
            Assert.Equal(hash, SHA256.HashData(await whole.Content.ReadAsByteArrayAsync()));
        }
        byte[] part = await client.GetByteArrayAsync("sendfile/u.bin?offset=1000001&count=300000");
        Assert.Equal(content.AsSpan(1000001, 300000).ToArray(), part);
        AssertReadOnLoops(server, before, content.Length + 300000);
        await AssertNoFileOpenAsync();
    }

    // Kestrel's own copy opens the file once; the loop's path decides by the file's size first and must not add an
    // open of its own where it hands a small file to Kestrel's copy.
    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task SendFileAsync_opens_the_file_once_with_or_without_a_count(TransportKind kind)
    {
        WriteFile("small.bin", 1000);
        WriteFile("large.bin", 200_000);
        await using TestServer server = await StartAsync(kind, "http1");
        using HttpClient client = server.CreateClient();
        foreach (string name in new[] { "small.bin", "large.bin" })
        {
            using var opens = new FileOpenWatch(Path.Combine(_root, name));
            foreach (string query in new[] { "", "?count=900" })
            {
                Assert.NotEmpty(await client.GetByteArrayAsync($"sendfile/{name}{query}"));
                Assert.True(opens.TakeOpens() is var n && n == 1, $"{name}{query}: opened {n} times");
            }
        }
    }

    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task SendFileAsync_without_a_count_sends_to_the_end_even_where_the_size_says_zero(TransportKind kind)
    {
        Assert.Equal(0, new FileInfo("/proc/version").Length);
        await using TestServer server = await StartAsync(kind, "http1");
        using HttpClient client = server.CreateClient();
        Assert.Equal(File.ReadAllText("/proc/version"), await client.GetStringAsync("proc-version"));
    }

    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task Ranges_single_suffix_and_past_the_end_answer_as_kestrel_does(TransportKind kind)
    {
        const int Size = 200_000;
        WriteFile("r.bin", Size);
        byte[] content = File.ReadAllBytes(Path.Combine(_root, "r.bin"));
        await using TestServer server = await StartAsync(kind, "http1");
        using HttpClient client = server.CreateClient();
        foreach (string url in new[] { "static/r.bin", "file/r.bin" })
        {
            await AssertRangeAsync(client, url, new RangeHeaderValue(10, 20), content, 10, 11);
            await AssertRangeAsync(client, url, new RangeHeaderValue(Size - Chunk - 7, null), content, Size - Chunk - 7,
                Chunk + 7);
            await AssertRangeAsync(client, url, new RangeHeaderValue(null, 100), content, Size - 100, 100);
            await AssertRangeAsync(client, url, new RangeHeaderValue(Size - 5, Size + 1000), content, Size - 5, 5);

            using var past = new HttpRequestMessage(HttpMethod.Get, url) { Headers = { Range = new RangeHeaderValue(Size + 1, null) } };
            using HttpResponseMessage refused = await client.SendAsync(past);
            Assert.Equal(HttpStatusCode.RequestedRangeNotSatisfiable, refused.StatusCode);
            Assert.Equal($"bytes */{Size}", refused.Content.Headers.ContentRange!.ToString());
        }
        await AssertNoFileOpenAsync();
    }

    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task A_file_truncated_while_it_is_sent_fails_the_response_and_the_connection_does_not_hang(
        TransportKind kind)
    {
        WriteFile("t.bin", LargeSize);
        await using TestServer server = await StartAsync(kind, "http1");
        using Socket socket = await ConnectSmallWindowAsync(server);
        await RawClient.SendAsync(socket, "GET /static/t.bin HTTP/1.1\r\nHost: test\r\n\r\n");
        var buffer = new byte[64 * 1024];
        long received = 0;
        while (received < 1024 * 1024)
        {
            received += await socket.ReceiveAsync(buffer);
        }
        using (var truncate = new FileStream(Path.Combine(_root, "t.bin"), FileMode.Open, FileAccess.Write))
        {
            truncate.SetLength(2 * 1024 * 1024);
        }
        // The server cannot send the promised length: it ends the connection, well before the whole file.
        using var guard = new CancellationTokenSource(TimeSpan.FromSeconds(30));
        int n;
        while ((n = await socket.ReceiveAsync(buffer, guard.Token)) > 0)
        {
            received += n;
        }
        output.WriteLine($"{kind}: {received} bytes before the connection ended");
        Assert.True(received < LargeSize, $"{received} bytes");
        await AssertNoFileOpenAsync();
        using HttpClient client = server.CreateClient();
        Assert.Equal(HttpStatusCode.NotFound, (await client.GetAsync("static/none.bin")).StatusCode); // still serving
    }

    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task A_file_deleted_while_it_is_sent_still_arrives_whole(TransportKind kind)
    {
        byte[] hash = WriteFile("d.bin", 8 * 1024 * 1024);
        await using TestServer server = await StartAsync(kind, "http1");
        using HttpClient client = server.CreateClient();
        using HttpResponseMessage response = await client.GetAsync("file/d.bin", HttpCompletionOption.ResponseHeadersRead);
        Stream body = await response.Content.ReadAsStreamAsync();
        var first = new byte[4096];
        await body.ReadExactlyAsync(first);
        File.Delete(Path.Combine(_root, "d.bin")); // the open handle keeps the file's bytes
        var rest = new MemoryStream();
        await body.CopyToAsync(rest);
        Assert.Equal(hash, SHA256.HashData([.. first, .. rest.ToArray()]));
        await AssertNoFileOpenAsync();
    }

    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task A_client_that_aborts_mid_file_leaves_no_file_open_and_the_server_serving(TransportKind kind)
    {
        byte[] hash = WriteFile("a.bin", LargeSize);
        await using TestServer server = await StartAsync(kind, "http1");
        for (int i = 0; i < 5; i++)
        {
            using Socket socket = await ConnectSmallWindowAsync(server);
            await RawClient.SendAsync(socket, "GET /static/a.bin HTTP/1.1\r\nHost: test\r\n\r\n");
            var buffer = new byte[64 * 1024];
            long received = 0;
            while (received < 512 * 1024)
            {
                received += await socket.ReceiveAsync(buffer);
            }
            socket.LingerState = new LingerOption(true, 0); // a reset, as a browser's cancelled download
            socket.Close();
        }
        await AssertNoFileOpenAsync();
        using HttpClient client = server.CreateClient();
        Assert.Equal(hash, SHA256.HashData(await client.GetByteArrayAsync("static/a.bin")));
    }

    [Fact]
    public async Task A_client_that_stops_reading_holds_the_server_to_a_bounded_read_ahead()
    {
        WriteFile("s.bin", LargeSize);
        await using TestServer server = await StartAsync(TransportKind.IoUring, "http1");
        EventLoopCounters before = Totals(server);
        using Socket socket = await ConnectSmallWindowAsync(server);
        await RawClient.SendAsync(socket, "GET /static/s.bin HTTP/1.1\r\nHost: test\r\n\r\n");
        await Task.Delay(500); // not reading: the socket buffers fill, then Kestrel's response buffer, then it waits
        long stalled = Totals(server).FileBytesRead - before.FileBytesRead;
        await Task.Delay(1000);
        long later = Totals(server).FileBytesRead - before.FileBytesRead;
        output.WriteLine($"read from the file with the client not reading: {stalled} bytes, {later} a second later");
        Assert.Equal(stalled, later); // waiting, not reading on
        // The socket's buffers (this side's receive buffer is small, the server's send buffer autotunes up to wmem's
        // maximum), Kestrel's MaxResponseBufferSize and one chunk: far less than the file.
        Assert.InRange(later, 1, 8 * 1024 * 1024);
        socket.Close();
        await AssertNoFileOpenAsync();
    }

    [Theory]
    [InlineData(TransportKind.Sockets)]
    [InlineData(TransportKind.IoUring)]
    public async Task Two_hundred_downloads_of_different_files_at_once_all_arrive_intact(TransportKind kind)
    {
        var random = new Random(200);
        var files = Enumerable.Range(0, 200)
            .Select(i => (Name: $"c{i}.bin", Hash: WriteFile($"c{i}.bin", random.Next(0, 1024 * 1024))))
            .ToArray();
        await using TestServer server = await StartAsync(kind, "http1");
        using HttpClient client = server.CreateClient(handler: new SocketsHttpHandler { MaxConnectionsPerServer = 200 });
        await Task.WhenAll(files.Select(async (f, i) =>
        {
            byte[] body = await client.GetByteArrayAsync(i % 2 == 0 ? $"static/{f.Name}" : $"file/{f.Name}");
            Assert.Equal(f.Hash, SHA256.HashData(body));
        }));
        await AssertNoFileOpenAsync();
    }

    [Fact]
    public async Task Switched_off_the_files_go_through_kestrels_own_copy()
    {
        byte[] hash = WriteFile("o.bin", 3 * 1024 * 1024);
        await using TestServer server = await StartAsync(TransportKind.IoUring, "http1",
            o => o.ReadFilesOnLoops = false);
        EventLoopCounters before = Totals(server);
        using HttpClient client = server.CreateClient();
        Assert.Equal(hash, SHA256.HashData(await client.GetByteArrayAsync("static/o.bin")));
        Assert.Equal(0, Totals(server).FileBytesRead - before.FileBytesRead);
    }

    private async Task AssertRangeAsync(HttpClient client, string url, RangeHeaderValue range, byte[] content,
        long from, int length)
    {
        using var request = new HttpRequestMessage(HttpMethod.Get, url) { Headers = { Range = range } };
        using HttpResponseMessage response = await client.SendAsync(request);
        Assert.Equal(HttpStatusCode.PartialContent, response.StatusCode);
        Assert.Equal($"bytes {from}-{from + length - 1}/{content.Length}", response.Content.Headers.ContentRange!.ToString());
        Assert.Equal(content.AsSpan((int)from, length).ToArray(), await response.Content.ReadAsByteArrayAsync());
    }

    private Task<TestServer> StartAsync(TransportKind kind, string protocol,
        Action<IoUringTransportOptions>? ioUring = null)
        => TestServer.StartAsync(kind, app =>
        {
            app.UseStaticFiles(new StaticFileOptions
            {
                FileProvider = new PhysicalFileProvider(_root),
                RequestPath = "/static",
                ServeUnknownFileTypes = true,
            });
            app.MapGet("/file/{name}", (string name) => Results.File(Path.Combine(_root, name),
                "application/octet-stream", enableRangeProcessing: true));
            app.MapGet("/proc-version", (HttpContext context) => context.Response.SendFileAsync("/proc/version", 0, null));
            // No Content-Length: HTTP/1.1 answers chunked.
            app.MapGet("/sendfile/{name}", (HttpContext context, string name, long? offset, long? count)
                => context.Response.SendFileAsync(Path.Combine(_root, name), offset ?? 0, count));
        }, o =>
        {
            o.Protocols = protocol == "http1" ? HttpProtocols.Http1 : HttpProtocols.Http2;
            if (protocol == "tls-h2")
            {
                o.Certificate = TestCertificate.Server;
            }
            o.IoUring = ioUring;
        });

    /// <summary>Random bytes of <paramref name="size"/>; returns their SHA-256.</summary>
    private byte[] WriteFile(string name, int size)
    {
        byte[] bytes = new byte[size];
        new Random(size ^ name.Length).NextBytes(bytes);
        File.WriteAllBytes(Path.Combine(_root, name), bytes);
        return SHA256.HashData(bytes);
    }

    private static void AssertReadOnLoops(TestServer server, EventLoopCounters before, long bytes)
    {
        long read = Totals(server).FileBytesRead - before.FileBytesRead;
        if (server.Transport == TransportKind.IoUring)
        {
            Assert.Equal(bytes, read);
        }
    }

    /// <summary>The server holds no fd of a file under the test's folder (a response's file is closed when it ends,
    /// also when it failed).</summary>
    private async Task AssertNoFileOpenAsync()
    {
        await Eventually.HoldsAsync(() => OpenFilesUnderRoot().Count == 0);
        Assert.Empty(OpenFilesUnderRoot());
    }

    private List<string> OpenFilesUnderRoot()
    {
        var open = new List<string>();
        foreach (string entry in Directory.GetFileSystemEntries("/proc/self/fd"))
        {
            try
            {
                if (new FileInfo(entry).LinkTarget is { } target && target.StartsWith(_root, StringComparison.Ordinal))
                {
                    open.Add(target);
                }
            }
            catch (IOException)
            {
                // closed while we looked
            }
        }
        return open;
    }

    /// <summary>A client with a small receive buffer, so a server's sends stall soon when it stops reading.</summary>
    private static async Task<Socket> ConnectSmallWindowAsync(TestServer server)
    {
        var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp)
        {
            ReceiveBufferSize = 64 * 1024,
        };
        await socket.ConnectAsync(server.EndPoint);
        return socket;
    }

    private static IoUringNetwork? Network(TestServer server)
        => (server.App.Services.GetServices<IConnectionListenerFactory>().Last() as IoUringTransportFactory)?.Network;

    private static EventLoopCounters Totals(TestServer server)
        => Network(server)?.Loops.Aggregate(default(EventLoopCounters), (sum, loop) => sum + loop.Counters) ?? default;
}
