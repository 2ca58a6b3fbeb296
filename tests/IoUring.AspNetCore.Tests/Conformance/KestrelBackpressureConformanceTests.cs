using System.Collections.Concurrent;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.AspNetCore.Tests.Support;

namespace IoUring.AspNetCore.Tests.Conformance;

/// <summary>
/// Backpressure under Kestrel (MaxReadBufferSize reached while the app does not read): shutdown aborts a paused
/// connection, and a client reset while paused ends the app's body read, over TCP and TLS. The plain API's
/// backpressure: IoUring.Tests' BackpressureTests; the listener's: <see cref="ListenerConformanceTests"/>.
/// </summary>
public abstract partial class KestrelConformanceTests
{
    [Fact]
    public async Task Shutdown_with_a_connection_paused_by_backpressure_aborts_it()
    {
        var probe = new AppProbe();
        TestServer server = await StartAsync(probe, o => { o.MaxReadBufferSize = 64 * 1024; o.ShutdownTimeout = TimeSpan.FromSeconds(1); });
        using Socket socket = await server.ConnectAsync();
        await RawClient.SendAsync(socket, "POST /slow-upload HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000000\r\n\r\n");
        await WaitAsync(probe.RequestStarted.Task);
        Task<long> sending = Task.Run(async () =>
        {
            byte[] chunk = new byte[1 << 16];
            long sent = 0;
            try
            {
                while (true)
                {
                    sent += await socket.SendAsync(chunk.AsMemory());
                }
            }
            catch (SocketException)
            {
                return sent; // the server's reset ends it
            }
        });
        await Task.WhenAny(sending, Task.Delay(TimeSpan.FromSeconds(1)));
        Assert.False(sending.IsCompleted);

        await server.StopAsync();

        Assert.InRange(await WaitAsync(sending), 1, 999_999_999);
        await Task.WhenAll(server.Connections.All.Select(c => WaitAsync(c.Closed)));
        probe.Release.TrySetResult();
        await server.DisposeAsync();
    }

    [Fact]
    public async Task Client_reset_while_paused_by_backpressure_fails_the_body_read_once_the_app_reads()
    {
        // The client resets while the transport has stopped receiving (the app does not read yet); then the app
        // reads. Every round the read must end with the reset, not wait forever for bytes that will never come.
        const int Rounds = 8;
        for (int round = 0; round < Rounds; round++)
        {
            var probe = new AppProbe();
            await using TestServer server = await StartAsync(probe, o => o.ShutdownTimeout = TimeSpan.FromSeconds(1));
            Socket socket = await server.ConnectAsync();
            await RawClient.SendAsync(socket, "POST /slow-upload HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000000\r\n\r\n");
            await WaitAsync(probe.RequestStarted.Task);
            Task sending = Task.Run(async () =>
            {
                byte[] chunk = new byte[1 << 16];
                try
                {
                    while (true)
                    {
                        await socket.SendAsync(chunk.AsMemory());
                    }
                }
                catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
                {
                    // the reset below ends it
                }
            });
            await WaitAsync(UntilAsync(() => server.Logs.Records.Any(r => r.EventId.Name == "ConnectionPause")));
            await Task.Delay(300); // the client's send buffer and the server's receive queue fill up too

            RawClient.Reset(socket);
            await WaitAsync(sending);
            await Task.Delay(200); // the reset has reached the server's socket
            probe.Release.SetResult();

            Task ended = await Task.WhenAny(probe.BodyReadEnded.Task, Task.Delay(TimeSpan.FromSeconds(10)));
            Assert.True(ended == probe.BodyReadEnded.Task, $"round {round + 1} of {Rounds}: the app's body read did not end within 10 s of the client's reset");
            Assert.IsAssignableFrom<IOException>(await probe.BodyReadEnded.Task);
        }
    }

    private static async Task UntilAsync(Func<bool> condition)
    {
        while (!condition())
        {
            await Task.Delay(10);
        }
    }

    [Fact]
    public async Task Https_client_reset_mid_upload_after_backpressure_fails_the_body_read_every_time()
    {
        // The same as the HTTP/1.1 reset case above, repeated: the upload outruns TLS decryption, so the transport
        // pauses receiving (MaxReadBufferSize 1 MiB) and resumes, and the reset lands around that. Every round the
        // body read must end (ConnectionResetException, an IOException) rather than wait forever.
        const int Rounds = 10;
        for (int round = 0; round < Rounds; round++)
        {
            var probe = new AppProbe();
            await using TestServer server = await StartHttpsAsync(probe, o => o.ShutdownTimeout = TimeSpan.FromSeconds(1));
            var sockets = new ConcurrentQueue<Socket>();
            using HttpClient client = server.CreateClient(handler: CapturingHandler(sockets));
            Task<HttpResponseMessage> upload = client.PostAsync("upload", Pattern.Content(1L << 30));
            await WaitAsync(probe.RequestStarted.Task);

            RawClient.Reset(Assert.Single(sockets));

            Task ended = await Task.WhenAny(probe.BodyReadEnded.Task, Task.Delay(TimeSpan.FromSeconds(10)));
            int pauses = server.Logs.Records.Count(r => r.EventId.Name == "ConnectionPause");
            int resumes = server.Logs.Records.Count(r => r.EventId.Name == "ConnectionResume");
            Assert.True(ended == probe.BodyReadEnded.Task, $"round {round + 1} of {Rounds}: the app's body read did not end within 10 s of the client's reset (transport paused {pauses}x, resumed {resumes}x)");
            Assert.IsAssignableFrom<IOException>(await probe.BodyReadEnded.Task);
            await Assert.ThrowsAnyAsync<Exception>(() => WaitAsync(upload));
        }
    }
}
