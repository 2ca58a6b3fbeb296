using System.Collections.Concurrent;
using System.Security.Cryptography;
using System.Text.Json;
using IoUring.AspNetCore.Tests.Support;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Tests.Browser;

/// <summary>
/// A real browser on the io_uring transport: headless Chromium loads a page from Kestrel, and the page's script
/// fetches, downloads, uploads and runs WebSocket echoes against the same server, checking what it gets back, then
/// POSTs its report to the server. The test asserts on that report, on the server's view of the requests, and on
/// the server's connections and logs.
/// </summary>
public sealed class BrowserTests
{
    private const long DownloadSize = (8 << 20) + 3;
    private static readonly TimeSpan s_pageTimeout = TimeSpan.FromSeconds(30);
    private static readonly string s_page = ReadPage();

    private static string ReadPage()
    {
        using Stream stream = typeof(BrowserTests).Assembly.GetManifestResourceStream("Browser/page.html")!;
        using var reader = new StreamReader(stream);
        return reader.ReadToEnd();
    }

    [Fact]
    public Task Chromium_runs_a_page_with_fetches_and_WebSocket_echoes_over_HTTP_1_1()
        => RunPageAsync(https: false, expectedProtocol: "http/1.1");

    [Fact]
    public Task Chromium_runs_a_page_with_fetches_and_WebSocket_echoes_over_HTTPS_with_HTTP_2()
        => RunPageAsync(https: true, expectedProtocol: "h2");

    private static async Task RunPageAsync(bool https, string expectedProtocol)
    {
        var reported = new TaskCompletionSource<string>(TaskCreationOptions.RunContinuationsAsynchronously);
        var requests = new ConcurrentQueue<string>();
        await using TestServer server = await TestServer.StartAsync(TransportKind.IoUring, app =>
        {
            // What the server saw of each request: "<method> <path> <protocol>".
            app.Use((context, next) =>
            {
                requests.Enqueue($"{context.Request.Method} {context.Request.Path} {context.Request.Protocol}");
                return next(context);
            });
            TestApp.Map(new AppProbe())(app);
            app.MapGet("/browser", () => Results.Content(s_page, "text/html; charset=utf-8"));
            app.MapPost("/browser/result", async (HttpContext context) =>
            {
                using var reader = new StreamReader(context.Request.Body);
                reported.TrySetResult(await reader.ReadToEndAsync());
            });
        }, o =>
        {
            if (https)
            {
                o.Certificate = TestCertificate.Server;
                o.Protocols = HttpProtocols.Http1AndHttp2;
            }
        });

        // Over TLS the browser trusts exactly the test certificate, by its public key.
        string[] flags = https
            ? ["--ignore-certificate-errors-spki-list=" + Convert.ToBase64String(SHA256.HashData(TestCertificate.Server.PublicKey.ExportSubjectPublicKeyInfo()))]
            : [];
        var page = new Uri(server.BaseAddress, $"browser?download={DownloadSize}");
        Chromium chromium = await Chromium.StartAsync(page, flags);
        string json;
        try
        {
            Task first = await Task.WhenAny(reported.Task, Task.Delay(s_pageTimeout));
            Assert.True(first == reported.Task, $"the page reported nothing within {s_pageTimeout}; the server saw:\n{string.Join('\n', requests)}\nchromium:\n{chromium.Output}");
            json = await reported.Task;
        }
        finally
        {
            await chromium.DisposeAsync();
        }
        Assert.Empty(chromium.RunningProcesses());
        Assert.True(chromium.DirectoryDeleted);

        PageReport report = JsonSerializer.Deserialize<PageReport>(json, JsonSerializerOptions.Web)!;
        Assert.True(report.Error is null, $"the page failed: {report.Error}");
        Assert.Equal(expectedProtocol, report.Protocol);
        Assert.Equal(Enumerable.Repeat("Hello, World!", 6), report.Plaintext);
        Assert.Equal(new Digest(DownloadSize, Pattern.Sha256(DownloadSize)), report.Download);
        Assert.Equal(TestApp.Describe(1 << 20), report.Upload);

        WebSocketReport webSocket = report.WebSocket!;
        Assert.Equal((1000, "bye", true), (webSocket.Code, webSocket.Reason, webSocket.WasClean));
        Assert.Equal(["text", "text", "text", "binary", "binary", "binary", "binary"], webSocket.Echoes.Select(e => e.Kind));
        Assert.All(webSocket.Echoes, e => Assert.True(e.Same, $"{e.Kind} message of {e.Length} came back different"));
        Assert.Equal(
            new long[] { 0, 1, 65536, 1 << 20 }.Select(n => (n, Pattern.Sha256(n))),
            webSocket.Echoes.Where(e => e.Kind == "binary").Select(e => (e.Length, e.Sha256!)));

        // The server's side: the page and its requests in the protocol the browser reported (over HTTP/2 the WebSocket
        // too, as an extended CONNECT on the same connection: RFC 8441), on io_uring connections.
        string serverProtocol = https ? "HTTP/2" : "HTTP/1.1";
        Assert.Contains($"GET /browser {serverProtocol}", requests);
        Assert.Contains($"POST /upload {serverProtocol}", requests);
        Assert.Contains(https ? "CONNECT /ws HTTP/2" : "GET /ws HTTP/1.1", requests);
        Assert.NotEmpty(server.Connections.All);
        Assert.All(server.Connections.All, c => Assert.Equal("IoUringConnectionContext", c.ContextType));

        await server.StopAsync();
        server.Logs.AssertNoWarnings();
    }

    private sealed record PageReport(string? Error, string? Protocol, string[]? Plaintext, Digest? Download, string? Upload, WebSocketReport? WebSocket);

    private sealed record Digest(long Length, string Sha256);

    private sealed record WebSocketReport(int Code, string Reason, bool WasClean, EchoReport[] Echoes);

    private sealed record EchoReport(string Kind, long Length, bool Same, string? Sha256);
}
