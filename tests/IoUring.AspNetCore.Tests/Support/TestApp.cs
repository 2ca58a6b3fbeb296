using System.Buffers;
using System.Globalization;
using System.IO.Pipelines;
using System.Net.WebSockets;
using System.Security.Cryptography;
using System.Text;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Server.Kestrel.Core.Features;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>Signals from the application's side of a test server.</summary>
public sealed class AppProbe
{
    public TaskCompletionSource RequestStarted { get; } = NewSignal();
    public TaskCompletionSource RequestAborted { get; } = NewSignal();
    public TaskCompletionSource<Exception?> BodyReadEnded { get; } = new(TaskCreationOptions.RunContinuationsAsynchronously);
    public TaskCompletionSource Release { get; } = NewSignal();

    private static TaskCompletionSource NewSignal() => new(TaskCreationOptions.RunContinuationsAsynchronously);
}

/// <summary>The endpoints the conformance suite drives.</summary>
public static class TestApp
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    public static Action<WebApplication> Map(AppProbe probe) => app =>
    {
        app.UseWebSockets();

        app.MapGet("/plaintext", () => Results.Text("Hello, World!", "text/plain"));

        app.MapGet("/connection", (HttpContext context) => context.Connection.Id);

        // The request's headers as "name: value" lines, sorted (what a proxy forwarded); answers with X-Backend: yes.
        app.MapGet("/headers", (HttpContext context) =>
        {
            context.Response.Headers["X-Backend"] = "yes";
            return string.Join('\n', context.Request.Headers.OrderBy(h => h.Key, StringComparer.OrdinalIgnoreCase).Select(h => $"{h.Key}: {h.Value}"));
        });

        // "<protocol> <ALPN protocol> <scheme>" as the server saw the request: what TLS negotiated.
        app.MapGet("/tls", (HttpContext context) =>
        {
            ReadOnlyMemory<byte> alpn = context.Features.Get<ITlsApplicationProtocolFeature>()?.ApplicationProtocol ?? default;
            return $"{context.Request.Protocol} {(alpn.IsEmpty ? "-" : Encoding.ASCII.GetString(alpn.Span))} {context.Request.Scheme}";
        });

        // Echoes the body as it arrives: no Content-Length, so HTTP/1.1 answers chunked.
        app.MapPost("/echo", async (HttpContext context) =>
        {
            PipeReader reader = context.Request.BodyReader;
            PipeWriter writer = context.Response.BodyWriter;
            while (true)
            {
                ReadResult result = await reader.ReadAsync();
                foreach (ReadOnlyMemory<byte> segment in result.Buffer)
                {
                    await writer.WriteAsync(segment);
                }
                reader.AdvanceTo(result.Buffer.End);
                if (result.IsCompleted)
                {
                    break;
                }
            }
        });

        // Answers "<length> <sha256>" of the body; records how reading the body ended.
        app.MapPost("/upload", async (HttpContext context) =>
        {
            probe.RequestStarted.TrySetResult();
            try
            {
                (long length, string hash) = await HashBodyAsync(context.Request.BodyReader);
                probe.BodyReadEnded.TrySetResult(null);
                return Results.Text($"{length} {hash}");
            }
            catch (Exception ex)
            {
                probe.BodyReadEnded.TrySetResult(ex);
                throw;
            }
        });

        // Reads the body only once the test releases it: the transport's read buffer fills meanwhile. Records how reading ended.
        app.MapPost("/slow-upload", async (HttpContext context) =>
        {
            probe.RequestStarted.TrySetResult();
            await probe.Release.Task.WaitAsync(s_hangGuard);
            try
            {
                (long length, string hash) = await HashBodyAsync(context.Request.BodyReader);
                probe.BodyReadEnded.TrySetResult(null);
                return Results.Text($"{length} {hash}");
            }
            catch (Exception ex)
            {
                probe.BodyReadEnded.TrySetResult(ex);
                throw;
            }
        });

        app.MapGet("/download", async (HttpContext context, long size) =>
        {
            context.Response.ContentLength = size;
            context.Response.ContentType = "application/octet-stream";
            await WritePatternAsync(context.Response.BodyWriter, size, context.RequestAborted);
        });

        // Writes until the client goes away (RequestAborted, a failed write, or the output completed under it).
        app.MapGet("/stream", async (HttpContext context) =>
        {
            probe.RequestStarted.TrySetResult();
            try
            {
                await WritePatternAsync(context.Response.BodyWriter, long.MaxValue, context.RequestAborted);
            }
            catch (Exception)
            {
            }
            finally
            {
                probe.RequestAborted.TrySetResult();
            }
        });

        // Waits for the client to go away (or for the server to abort the request on shutdown).
        app.MapGet("/wait", async (HttpContext context) =>
        {
            probe.RequestStarted.TrySetResult();
            try
            {
                await Task.Delay(Timeout.Infinite, context.RequestAborted);
            }
            catch (OperationCanceledException)
            {
                probe.RequestAborted.TrySetResult();
            }
        });

        // Answers only when the test releases it.
        app.MapGet("/gate", async () =>
        {
            probe.RequestStarted.TrySetResult();
            await probe.Release.Task.WaitAsync(s_hangGuard);
            return Results.Text("released");
        });

        app.MapGet("/abort", (HttpContext context) => context.Abort());

        app.Map("/ws", async (HttpContext context) =>
        {
            if (!context.WebSockets.IsWebSocketRequest)
            {
                context.Response.StatusCode = StatusCodes.Status400BadRequest;
                return;
            }
            using WebSocket socket = await context.WebSockets.AcceptWebSocketAsync();
            byte[] buffer = new byte[1 << 16];
            var message = new ArrayBufferWriter<byte>();
            while (true)
            {
                ValueWebSocketReceiveResult result = await socket.ReceiveAsync(buffer.AsMemory(), CancellationToken.None);
                if (result.MessageType == WebSocketMessageType.Close)
                {
                    await socket.CloseAsync(WebSocketCloseStatus.NormalClosure, "bye", CancellationToken.None);
                    return;
                }
                message.Write(buffer.AsSpan(0, result.Count));
                if (result.EndOfMessage)
                {
                    await socket.SendAsync(message.WrittenMemory, result.MessageType, endOfMessage: true, CancellationToken.None);
                    message.Clear();
                }
            }
        });
    };

    public static async Task<(long Length, string Hash)> HashBodyAsync(PipeReader reader)
    {
        using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        long length = 0;
        while (true)
        {
            ReadResult result = await reader.ReadAsync();
            foreach (ReadOnlyMemory<byte> segment in result.Buffer)
            {
                hash.AppendData(segment.Span);
                length += segment.Length;
            }
            reader.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                return (length, Convert.ToHexStringLower(hash.GetHashAndReset()));
            }
        }
    }

    private static async Task WritePatternAsync(PipeWriter writer, long size, CancellationToken cancellationToken)
    {
        const int Chunk = 1 << 16;
        for (long offset = 0; offset < size; offset += Chunk)
        {
            // Once Kestrel has given up on the response, writes become no-ops: stop on the token, not on a failed write.
            cancellationToken.ThrowIfCancellationRequested();
            int count = (int)Math.Min(Chunk, size - offset);
            Memory<byte> memory = writer.GetMemory(count);
            Pattern.Fill(offset, memory.Span[..count]);
            writer.Advance(count);
            FlushResult flush = await writer.FlushAsync(cancellationToken);
            if (flush.IsCompleted || flush.IsCanceled)
            {
                return;
            }
        }
    }

    public static string Describe(long length) => length.ToString(CultureInfo.InvariantCulture) + " " + Pattern.Sha256(length);
}
