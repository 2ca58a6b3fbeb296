// Kestrel on io_uring: the TechEmpower plaintext and json endpoints, an echo WebSocket, a large download, an upload
// and, with --static-root, static files; with --db, TechEmpower's database endpoints on PostgreSQL.
//
//   dotnet run -c Release -- [--transport iouring|sockets] [--inline] [--stats] [--urls http://127.0.0.1:5000]
//                            [--cert server.pfx[:password]] [--kestrel-pool] [--h2c] [--static-root DIR]
//                            [--no-loop-files] [--report-iowait] [--db "Host=...;Database=hello_world;..."]
//
//   --cert    the server certificate (a PFX file) for https:// URLs; the default URLs become
//             http://127.0.0.1:5000 and https://127.0.0.1:5001. Kestrel's own configuration works too:
//             Kestrel:Certificates:Default:Path and :Password (e.g. Kestrel__Certificates__Default__Path=server.pfx).
//   --inline  UnsafePreferInlineScheduling on the selected transport (for Sockets as TechEmpower runs it, also set
//             DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1)
//   --kestrel-pool  io_uring connections use Kestrel's memory pool, not their loops' registered pools
//             (IoUringTransportOptions.UseLoopMemoryPools = false: the comparison of benchmarks/run-kestrel.sh)
//   --static-root DIR  serves DIR's files: UseStaticFiles at /static/NAME (StaticFileMiddleware) and GET /file/NAME
//             (Results.File, range requests enabled; NAME without '/' or ".."): both send the body through
//             IHttpResponseBodyFeature.SendFileAsync, which io_uring serves on its loops (ReadFilesOnLoops)
//   --no-loop-files  io_uring leaves SendFileAsync to Kestrel (IoUringTransportOptions.ReadFilesOnLoops = false:
//             Kestrel's FileStream copy on the thread pool; the comparison of benchmarks/run-kestrel.sh)
//   --report-iowait  the loops' sleeps count as iowait, as the kernel does by default (ReportIoWait = true)
//   --h2c     every endpoint speaks HTTP/2 only, so cleartext ones take HTTP/2 with prior knowledge (h2c; Kestrel's
//             default for cleartext is HTTP/1.1 only): curl --http2-prior-knowledge, h2load http://...
//   --db CONNECTION_STRING  maps TechEmpower's GET /db, /queries?queries=N, /fortunes and /updates?queries=N on that
//             PostgreSQL database (Npgsql; Database.cs), e.g. the one benchmarks/db/postgres.sh starts and prints
//   KESTREL_SAMPLE_SLOWDOWN=P (environment)  loses P% of requests per CPU-second on purpose (Slowdown.cs): the check
//             that benchmarks/compare.sh detects a regression of that size
//   --stats   maps GET /_stats: GC.GetTotalAllocatedBytes(precise: true) as text, GET /_threadpool: thread-pool work
//             items completed, and GET /_jit: methods JIT-compiled
//             so far (benchmarks/run-kestrel.sh samples both)
//
//   curl http://127.0.0.1:5000/plaintext
//   curl -k --http2 https://127.0.0.1:5001/plaintext
//   curl http://127.0.0.1:5000/json
//   curl -o /dev/null http://127.0.0.1:5000/download?size=1000000000
//   websocat ws://127.0.0.1:5000/ws
//   curl -o /dev/null http://127.0.0.1:5000/static/NAME     (with --static-root; likewise /file/NAME)
//   curl http://127.0.0.1:5000/fortunes                      (with --db; likewise /db, /queries?queries=20, /updates?queries=20)
using System.IO.Pipelines;
using System.Net.WebSockets;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;
using System.Text.Json.Serialization;
using IoUring.AspNetCore;
using Microsoft.Extensions.FileProviders;

// Valueless flags are taken out before configuration sees them: its command-line provider would read the next
// argument as their value.
bool inline = args.Contains("--inline");
bool stats = args.Contains("--stats");
bool kestrelPool = args.Contains("--kestrel-pool");
bool h2c = args.Contains("--h2c");
bool noLoopFiles = args.Contains("--no-loop-files");
bool reportIoWait = args.Contains("--report-iowait");
WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(
    args.Where(a => a is not ("--inline" or "--stats" or "--kestrel-pool" or "--h2c" or "--no-loop-files"
        or "--report-iowait")).ToArray());
if (h2c)
{
    builder.WebHost.ConfigureKestrel(k => k.ConfigureEndpointDefaults(l => l.Protocols = Microsoft.AspNetCore.Server.Kestrel.Core.HttpProtocols.Http2));
}

string transport = builder.Configuration["transport"] ?? "iouring";
string? staticRoot = builder.Configuration["static-root"];
if (!string.IsNullOrEmpty(staticRoot))
{
    if (!Directory.Exists(staticRoot))
    {
        Console.Error.WriteLine($"--static-root: no directory '{staticRoot}'.");
        return 2;
    }
    staticRoot = Path.GetFullPath(staticRoot);
}
switch (transport)
{
    case "iouring":
        builder.WebHost.UseIoUring(o =>
        {
            o.UnsafePreferInlineScheduling = inline;
            o.UseLoopMemoryPools = !kestrelPool;
            o.ReadFilesOnLoops = !noLoopFiles;
            o.ReportIoWait = reportIoWait;
        });
        break;
    case "sockets":
        builder.WebHost.UseSockets(o => o.UnsafePreferInlineScheduling = inline);
        break;
    default:
        Console.Error.WriteLine($"Unknown --transport '{transport}': use iouring or sockets.");
        return 2;
}

// HTTPS: https:// URLs and the Kestrel:Certificates / Kestrel:Endpoints configuration (the slim builder leaves them out).
builder.WebHost.UseKestrelHttpsConfiguration();
string? cert = builder.Configuration["cert"];
if (!string.IsNullOrEmpty(cert))
{
    int colon = cert.IndexOf(':', StringComparison.Ordinal);
    string path = colon < 0 ? cert : cert[..colon];
    string? password = colon < 0 ? null : cert[(colon + 1)..];
    if (!File.Exists(path))
    {
        Console.Error.WriteLine($"--cert: no file '{path}' (give a PFX file as path or path:password).");
        return 2;
    }
    X509Certificate2 certificate;
    try
    {
        certificate = X509CertificateLoader.LoadPkcs12FromFile(path, password);
    }
    catch (Exception ex) when (ex is CryptographicException or IOException or UnauthorizedAccessException)
    {
        Console.Error.WriteLine($"--cert: cannot load '{path}' as a PFX file{(password is null ? " without a password" : "")}: {ex.Message}");
        return 2;
    }
    if (!certificate.HasPrivateKey)
    {
        Console.Error.WriteLine($"--cert: '{path}' holds no private key: a server certificate needs one.");
        return 2;
    }
    builder.WebHost.ConfigureKestrel(k => k.ConfigureHttpsDefaults(https => https.ServerCertificate = certificate));
}
if (string.IsNullOrEmpty(builder.Configuration["urls"]))
{
    builder.WebHost.UseUrls(string.IsNullOrEmpty(cert) ? "http://127.0.0.1:5000" : "http://127.0.0.1:5000;https://127.0.0.1:5001");
}
builder.Logging.SetMinimumLevel(LogLevel.Warning);
builder.Logging.AddFilter("Microsoft.Hosting.Lifetime", LogLevel.Information);
builder.Logging.AddFilter("IoUring.AspNetCore.Transport", LogLevel.Information); // the start line: what is on
// A failed start is reported once, below or as the unhandled exception, not also as a logged stack trace first.
builder.Logging.AddFilter("Microsoft.Extensions.Hosting.Internal.Host", LogLevel.Critical);
builder.Services.ConfigureHttpJsonOptions(o => o.SerializerOptions.TypeInfoResolverChain.Insert(0, SampleJsonContext.Default));

if (stats)
{
    MemoryReport.Start();
}
if (Slowdown.Configure() is string slowdownError)
{
    Console.Error.WriteLine(slowdownError);
    return 2;
}
WebApplication app = builder.Build();
if (Slowdown.IsOn)
{
    app.Use(Slowdown.Middleware);   // benchmarks/compare.sh's self-check only
}
app.UseWebSockets();
if (builder.Configuration["db"] is { Length: > 0 } db && await Database.MapAsync(app, db) is { } dbError)
{
    Console.Error.WriteLine(dbError);
    return 2;
}

if (staticRoot is not null)
{
    // Both go through IHttpResponseBodyFeature.SendFileAsync: the path ReadFilesOnLoops moves onto the loops.
    // (The slim builder needs no services for UseStaticFiles: the middleware takes what it lacks from its options.)
    app.UseStaticFiles(new StaticFileOptions { FileProvider = new PhysicalFileProvider(staticRoot), RequestPath = "/static" });
    app.MapGet("/file/{name}", (string name) =>
    {
        if (name.Contains('/', StringComparison.Ordinal) || name.Contains("..", StringComparison.Ordinal))
        {
            return Results.BadRequest("a file name, without '/' or '..'");
        }
        string path = Path.Combine(staticRoot, name);
        return File.Exists(path) ? Results.File(path, "application/octet-stream", enableRangeProcessing: true) : Results.NotFound();
    });
}

app.MapGet("/plaintext", () => Results.Text("Hello, World!", "text/plain"));

app.MapGet("/json", () => new Greeting("Hello, World!"));

app.MapGet("/download", async (HttpContext context, long size) =>
{
    if (size < 0)
    {
        return Results.BadRequest("size must not be negative");
    }
    context.Response.ContentType = "application/octet-stream";
    context.Response.ContentLength = size;
    ReadOnlyMemory<byte> chunk = Download.Chunk;
    for (long left = size; left > 0; left -= chunk.Length)
    {
        await context.Response.BodyWriter.WriteAsync(chunk[..(int)Math.Min(chunk.Length, left)], context.RequestAborted);
    }
    return Results.Empty;
});

// Reads the request body to its end and answers with its length: bulk receive (the harness's upload scenarios).
app.MapPost("/upload", async (HttpContext context) =>
{
    PipeReader body = context.Request.BodyReader;
    long length = 0;
    while (true)
    {
        ReadResult read = await body.ReadAsync(context.RequestAborted);
        length += read.Buffer.Length;
        body.AdvanceTo(read.Buffer.End);
        if (read.IsCompleted)
        {
            break;
        }
    }
    return Results.Text(length.ToString(System.Globalization.CultureInfo.InvariantCulture), "text/plain");
});

if (stats)
{
    // Sampled before and after a measured window: the difference over the requests served is bytes allocated per request.
    app.MapGet("/_stats", () => Results.Text(GC.GetTotalAllocatedBytes(precise: true).ToString(System.Globalization.CultureInfo.InvariantCulture), "text/plain"));
    // Methods compiled so far: the runtime tiers code up for tens of seconds under load, so the harness warms up until this stops growing.
    app.MapGet("/_jit", () => Results.Text(System.Runtime.JitInfo.GetCompiledMethodCount().ToString(System.Globalization.CultureInfo.InvariantCulture), "text/plain"));
    // Thread-pool work items completed so far: over a measured window, divided by its requests, the hops per request.
    // Memory: the process's RSS, the GC's heap, and every memory-pool instrument the transports publish (IoUring's
    // loop pools, Kestrel's pool), as "name value" lines: benchmarks/run-kestrel.sh's memory scenarios sample it.
    app.MapGet("/_memory", () => Results.Text(MemoryReport.Text(), "text/plain"));
    app.MapGet("/_threadpool", () => Results.Text(ThreadPool.CompletedWorkItemCount.ToString(System.Globalization.CultureInfo.InvariantCulture), "text/plain"));
}

app.Map("/ws", async (HttpContext context) =>
{
    if (!context.WebSockets.IsWebSocketRequest)
    {
        return Results.BadRequest("expected a WebSocket request");
    }
    using WebSocket socket = await context.WebSockets.AcceptWebSocketAsync();
    byte[] buffer = new byte[16 * 1024];
    while (true)
    {
        ValueWebSocketReceiveResult received = await socket.ReceiveAsync(buffer.AsMemory(), context.RequestAborted);
        if (received.MessageType == WebSocketMessageType.Close)
        {
            await socket.CloseAsync(WebSocketCloseStatus.NormalClosure, null, context.RequestAborted);
            return Results.Empty;
        }
        await socket.SendAsync(buffer.AsMemory(0, received.Count), received.MessageType, received.EndOfMessage, context.RequestAborted);
    }
});

try
{
    await app.StartAsync();
}
catch (InvalidOperationException ex) when (string.IsNullOrEmpty(cert) && ex.Message.Contains("certificate", StringComparison.OrdinalIgnoreCase))
{
    Console.Error.WriteLine($"An https:// URL needs a server certificate: pass --cert server.pfx[:password], or set Kestrel:Certificates:Default:Path " +
        $"(and :Password), e.g. Kestrel__Certificates__Default__Path=server.pfx. Make one with openssl or `dotnet dev-certs https -ep server.pfx -p PASSWORD`.\n({ex.Message})");
    return 2;
}
bool fellBack = app.Services.GetServices<Microsoft.AspNetCore.Connections.IConnectionListenerFactory>().LastOrDefault() is IoUringTransportFactory { IsFallbackActive: true };
Console.WriteLine($"Transport: {(transport == "sockets" ? "Sockets" : fellBack ? "Sockets (io_uring unavailable, see the warning above)" : "io_uring")}{(inline ? ", inline scheduling" : "")}");
await app.WaitForShutdownAsync();
return 0;

internal sealed record Greeting(string Message);

[JsonSerializable(typeof(Greeting))]
internal sealed partial class SampleJsonContext : JsonSerializerContext;

internal static class Download
{
    public static readonly ReadOnlyMemory<byte> Chunk = Enumerable.Range(0, 64 * 1024).Select(i => (byte)('a' + i % 26)).ToArray();
}

/// <summary>The --stats memory report: RSS, GC heap and the memory-pool instruments of IoUring's and Kestrel's meters.</summary>
internal static class MemoryReport
{
    private static readonly System.Diagnostics.Metrics.MeterListener s_listener = new();
    private static readonly System.Collections.Concurrent.ConcurrentDictionary<string, long> s_sums = new();
    private static readonly System.Collections.Concurrent.ConcurrentDictionary<string, long> s_observed = new();

    /// <summary>Listens from startup: Kestrel's pool publishes up-down counters, whose level is the sum of every change.</summary>
    public static void Start()
    {
        s_listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name is "IoUring" or "Microsoft.AspNetCore.MemoryPool")
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        s_listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) =>
        {
            var target = instrument.IsObservable ? s_observed : s_sums;
            target.AddOrUpdate(instrument.Name, value, (_, old) => old + value);
        });
        s_listener.Start();
    }

    public static string Text()
    {
        s_observed.Clear();
        s_listener.RecordObservableInstruments(); // observable ones report their current level per loop: summed here
        GCMemoryInfo gc = GC.GetGCMemoryInfo();
        var text = new System.Text.StringBuilder();
        text.Append("rss ").Append(Environment.WorkingSet).Append('\n');
        text.Append("gc.heap ").Append(gc.HeapSizeBytes).Append('\n');
        text.Append("gc.committed ").Append(gc.TotalCommittedBytes).Append('\n');
        text.Append("gc.poh ").Append(gc.GenerationInfo[4].SizeAfterBytes).Append('\n');
        foreach (var (name, value) in s_observed.Concat(s_sums).OrderBy(p => p.Key, StringComparer.Ordinal))
        {
            if (name.Contains("memory_pool", StringComparison.Ordinal) || name.Contains("zero_copy", StringComparison.Ordinal))
            {
                text.Append(name).Append(' ').Append(value).Append('\n');
            }
        }
        return text.ToString();
    }
}
