// Kestrel on io_uring: the TechEmpower plaintext and json endpoints, an echo WebSocket and a large download.
//
//   dotnet run -c Release -- [--transport iouring|sockets] [--urls http://127.0.0.1:5000]
//
//   curl http://127.0.0.1:5000/plaintext
//   curl http://127.0.0.1:5000/json
//   curl -o /dev/null http://127.0.0.1:5000/download?size=1000000000
//   websocat ws://127.0.0.1:5000/ws
using System.Net.WebSockets;
using System.Text.Json.Serialization;
using IoUring.AspNetCore;

WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(args);

string transport = builder.Configuration["transport"] ?? "iouring";
switch (transport)
{
    case "iouring":
        builder.WebHost.UseIoUring();
        break;
    case "sockets":
        builder.WebHost.UseSockets();
        break;
    default:
        Console.Error.WriteLine($"Unknown --transport '{transport}': use iouring or sockets.");
        return 2;
}
if (string.IsNullOrEmpty(builder.Configuration["urls"]))
{
    builder.WebHost.UseUrls("http://127.0.0.1:5000");
}
builder.Logging.SetMinimumLevel(LogLevel.Warning);
builder.Logging.AddFilter("Microsoft.Hosting.Lifetime", LogLevel.Information);
builder.Services.ConfigureHttpJsonOptions(o => o.SerializerOptions.TypeInfoResolverChain.Insert(0, SampleJsonContext.Default));

WebApplication app = builder.Build();
app.UseWebSockets();

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

await app.StartAsync();
bool fellBack = app.Services.GetServices<Microsoft.AspNetCore.Connections.IConnectionListenerFactory>().LastOrDefault() is IoUringTransportFactory { IsFallbackActive: true };
Console.WriteLine($"Transport: {(transport == "sockets" ? "Sockets" : fellBack ? "Sockets (io_uring unavailable, see the warning above)" : "io_uring")}");
await app.WaitForShutdownAsync();
return 0;

internal sealed record Greeting(string Message);

[JsonSerializable(typeof(Greeting))]
internal sealed partial class SampleJsonContext : JsonSerializerContext;

internal static class Download
{
    public static readonly ReadOnlyMemory<byte> Chunk = Enumerable.Range(0, 64 * 1024).Select(i => (byte)('a' + i % 26)).ToArray();
}
