using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using IoUring.AspNetCore.Tests.Support;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore.Tests.Conformance;

/// <summary>
/// The IConnectionListenerFactory contract Kestrel relies on, driven directly (no Kestrel): listener lifetime, the
/// features of a ConnectionContext, half-close, reset, abort (also while paused by backpressure; backpressure under
/// Kestrel: <see cref="KestrelConformanceTests"/>' KestrelBackpressureConformanceTests.cs). Written once, run on Sockets and io_uring.
/// </summary>
public abstract class ListenerConformanceTests : IAsyncLifetime
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);
    private IConnectionListenerFactory _factory = null!;

    protected abstract IConnectionListenerFactory CreateFactory();

    public Task InitializeAsync()
    {
        _factory = CreateFactory();
        return Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        if (_factory is IAsyncDisposable disposable)
        {
            await disposable.DisposeAsync();
        }
    }

    private async Task<IConnectionListener> BindAsync() => await _factory.BindAsync(new IPEndPoint(IPAddress.Loopback, 0));

    private static async Task<(Socket Client, ConnectionContext Server)> ConnectAsync(IConnectionListener listener)
    {
        var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        ValueTask<ConnectionContext?> accept = listener.AcceptAsync();
        await client.ConnectAsync(listener.EndPoint).WaitAsync(s_hangGuard);
        ConnectionContext? server = await accept.AsTask().WaitAsync(s_hangGuard);
        Assert.NotNull(server);
        return (client, server);
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

    /// <summary>Waits until <paramref name="progress"/> stops growing (unchanged over 300 ms) and returns it; fails after 10 s.</summary>
    private static async Task<long> StalledAsync(Func<long> progress)
    {
        long last = -1;
        int unchanged = 0;
        for (int i = 0; i < 100; i++)
        {
            long now = progress();
            unchanged = now == last ? unchanged + 1 : 0;
            if (unchanged == 3)
            {
                return now;
            }
            last = now;
            await Task.Delay(100);
        }
        throw new Xunit.Sdk.XunitException($"still sending after 10 s ({last:N0} bytes): the input never paused");
    }

    private static Task ClosedAsync(ConnectionContext connection)
    {
        var closed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        connection.ConnectionClosed.Register(() => closed.TrySetResult());
        return closed.Task.WaitAsync(s_hangGuard);
    }

    [Fact]
    public async Task EndPoint_is_the_bound_endpoint_with_the_chosen_port()
    {
        await using IConnectionListener listener = await BindAsync();

        var endPoint = Assert.IsType<IPEndPoint>(listener.EndPoint);
        Assert.Equal(IPAddress.Loopback, endPoint.Address);
        Assert.NotEqual(0, endPoint.Port);
    }

    [Fact]
    public async Task AcceptAsync_returns_null_after_unbind_and_after_dispose()
    {
        IConnectionListener listener = await BindAsync();
        await listener.UnbindAsync();
        Assert.Null(await listener.AcceptAsync().AsTask().WaitAsync(s_hangGuard));

        await listener.DisposeAsync();
        Assert.Null(await listener.AcceptAsync().AsTask().WaitAsync(s_hangGuard));
    }

    [Fact]
    public async Task Unbind_while_AcceptAsync_waits_ends_it_with_null()
    {
        await using IConnectionListener listener = await BindAsync();
        ValueTask<ConnectionContext?> pending = listener.AcceptAsync();

        await listener.UnbindAsync();

        Assert.Null(await pending.AsTask().WaitAsync(s_hangGuard));
    }

    [Fact]
    public async Task Dispose_while_AcceptAsync_waits_ends_it_with_null()
    {
        IConnectionListener listener = await BindAsync();
        ValueTask<ConnectionContext?> pending = listener.AcceptAsync();

        await listener.DisposeAsync();

        Assert.Null(await pending.AsTask().WaitAsync(s_hangGuard));
    }

    [Fact]
    public async Task Unbind_refuses_new_connections_and_keeps_accepted_ones_open()
    {
        await using IConnectionListener listener = await BindAsync();
        EndPoint endPoint = listener.EndPoint;
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        using (client)
        {
            await listener.UnbindAsync();

            using var late = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            SocketException refused = await Assert.ThrowsAsync<SocketException>(() => late.ConnectAsync(endPoint).WaitAsync(s_hangGuard));
            Assert.Equal(SocketError.ConnectionRefused, refused.SocketErrorCode);

            await client.SendAsync("still here"u8.ToArray().AsMemory());
            client.Shutdown(SocketShutdown.Send);
            Assert.Equal("still here", await ReadToEndAsync(server.Transport.Input));
            await server.Transport.Output.WriteAsync("bye"u8.ToArray());
            await server.Transport.Output.CompleteAsync();
            await server.Transport.Input.CompleteAsync();
            Assert.Equal("bye", await RawClient.ReceiveUntilAsync(client, _ => false));
            await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        }
    }

    [Fact]
    public async Task Accepted_connection_has_the_features_Kestrel_uses()
    {
        await using IConnectionListener listener = await BindAsync();
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        using (client)
        {
            IFeatureCollectionAssert(server);
            Assert.False(string.IsNullOrEmpty(server.ConnectionId));
            Assert.Equal(client.LocalEndPoint, server.RemoteEndPoint);
            Assert.Equal(client.RemoteEndPoint, server.LocalEndPoint);
            Assert.Same(server.Transport, server.Features.Get<IConnectionTransportFeature>()!.Transport);
            Assert.NotNull(server.Features.Get<IMemoryPoolFeature>()!.MemoryPool);
            server.Items["key"] = "value";
            Assert.Equal("value", server.Features.Get<IConnectionItemsFeature>()!.Items["key"]);

            Socket socket = server.Features.Get<IConnectionSocketFeature>()!.Socket;
            Assert.Equal(client.LocalEndPoint, socket.RemoteEndPoint);
            Assert.True(socket.NoDelay);

            server.Abort();
            await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        }
    }

    private static void IFeatureCollectionAssert(ConnectionContext connection)
    {
        Assert.NotNull(connection.Features.Get<IConnectionIdFeature>());
        Assert.NotNull(connection.Features.Get<IConnectionTransportFeature>());
        Assert.NotNull(connection.Features.Get<IConnectionItemsFeature>());
        Assert.NotNull(connection.Features.Get<IMemoryPoolFeature>());
        Assert.NotNull(connection.Features.Get<IConnectionLifetimeFeature>());
        Assert.NotNull(connection.Features.Get<IConnectionSocketFeature>());
        var custom = new object();
        connection.Features.Set(custom);
        Assert.Same(custom, connection.Features.Get<object>());
    }

    [Fact]
    public async Task Echo_through_the_transport_pipes_keeps_every_byte()
    {
        await using IConnectionListener listener = await BindAsync();
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        const int Length = 16 << 20;
        using (client)
        {
            Task echo = Task.Run(async () =>
            {
                PipeReader input = server.Transport.Input;
                while (true)
                {
                    ReadResult result = await input.ReadAsync();
                    foreach (ReadOnlyMemory<byte> segment in result.Buffer)
                    {
                        await server.Transport.Output.WriteAsync(segment);
                    }
                    input.AdvanceTo(result.Buffer.End);
                    if (result.IsCompleted)
                    {
                        break;
                    }
                }
                await server.Transport.Output.CompleteAsync();
            });
            Task send = Task.Run(async () =>
            {
                byte[] chunk = new byte[12_345];
                for (int offset = 0; offset < Length; offset += chunk.Length)
                {
                    int count = Math.Min(chunk.Length, Length - offset);
                    Pattern.Fill(offset, chunk.AsSpan(0, count));
                    await client.SendAsync(chunk.AsMemory(0, count));
                }
                client.Shutdown(SocketShutdown.Send);
            });
            using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
            byte[] buffer = new byte[1 << 16];
            long total = 0;
            int n;
            while ((n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard)) > 0)
            {
                hash.AppendData(buffer, 0, n);
                total += n;
            }
            await Task.WhenAll(echo, send).WaitAsync(s_hangGuard);

            Assert.Equal(Length, total);
            Assert.Equal(Pattern.Sha256(Length), Convert.ToHexStringLower(hash.GetHashAndReset()));
            await server.Transport.Input.CompleteAsync();
            await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        }
    }

    [Fact]
    public async Task Client_fin_completes_input_fires_ConnectionClosed_and_output_still_arrives()
    {
        await using IConnectionListener listener = await BindAsync();
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        using (client)
        {
            Task closed = ClosedAsync(server);
            await client.SendAsync("request"u8.ToArray().AsMemory());
            client.Shutdown(SocketShutdown.Send);

            Assert.Equal("request", await ReadToEndAsync(server.Transport.Input));
            await closed;
            await server.Transport.Output.WriteAsync("response"u8.ToArray());
            await server.Transport.Output.CompleteAsync();
            await server.Transport.Input.CompleteAsync();

            Assert.Equal("response", await RawClient.ReceiveUntilAsync(client, _ => false));
            await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        }
    }

    [Fact]
    public async Task Client_reset_fails_reads_with_ConnectionResetException_and_fires_ConnectionClosed_once()
    {
        await using IConnectionListener listener = await BindAsync();
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        int fired = 0;
        server.ConnectionClosed.Register(() => Interlocked.Increment(ref fired));
        Task closed = ClosedAsync(server);

        RawClient.Reset(client);

        await Assert.ThrowsAsync<ConnectionResetException>(() => ReadToEndAsync(server.Transport.Input));
        await closed;
        await server.Transport.Output.CompleteAsync();
        await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        Assert.Equal(1, fired);
    }

    [Fact]
    public async Task Abort_resets_the_client_and_the_first_reason_wins()
    {
        await using IConnectionListener listener = await BindAsync();
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        using (client)
        {
            int fired = 0;
            server.ConnectionClosed.Register(() => Interlocked.Increment(ref fired));
            Task closed = ClosedAsync(server);

            server.Abort(new ConnectionAbortedException("first"));
            server.Abort(new ConnectionAbortedException("second"));

            ConnectionAbortedException error = await Assert.ThrowsAsync<ConnectionAbortedException>(() => ReadToEndAsync(server.Transport.Input));
            Assert.Equal("first", error.Message);
            SocketException reset = await Assert.ThrowsAsync<SocketException>(() => client.ReceiveAsync(new byte[16].AsMemory()).AsTask().WaitAsync(s_hangGuard));
            Assert.Equal(SocketError.ConnectionReset, reset.SocketErrorCode);
            await closed;
            await server.Transport.Output.CompleteAsync();
            await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
            Assert.Equal(1, fired);
        }
    }

    [Fact]
    public async Task Abort_while_input_is_paused_by_backpressure_still_closes()
    {
        await using IConnectionListener listener = await BindAsync();
        (Socket client, ConnectionContext server) = await ConnectAsync(listener);
        using (client)
        {
            Task closed = ClosedAsync(server);
            // Fill the read buffer (1 MiB by default) and the kernel's buffers without the server reading.
            byte[] chunk = new byte[1 << 16];
            long sent = 0;
            Task sending = Task.Run(async () =>
            {
                try
                {
                    while (true)
                    {
                        Interlocked.Add(ref sent, await client.SendAsync(chunk.AsMemory()));
                    }
                }
                catch (SocketException)
                {
                    // the reset ends it
                }
            });
            ReadResult first = await server.Transport.Input.ReadAsync().AsTask().WaitAsync(s_hangGuard);
            server.Transport.Input.AdvanceTo(first.Buffer.Start, first.Buffer.End);

            // The input paused: the transport stopped taking bytes, so the kernel's buffers filled and the client stalled.
            // Without backpressure the transport would keep reading into memory and the client would never stall.
            long stalledAt = await StalledAsync(() => Interlocked.Read(ref sent));
            Assert.InRange(stalledAt, 1 << 20, 64 << 20);
            ReadResult buffered = await server.Transport.Input.ReadAsync().AsTask().WaitAsync(s_hangGuard);
            Assert.InRange(buffered.Buffer.Length, 1 << 19, stalledAt);
            server.Transport.Input.AdvanceTo(buffered.Buffer.Start, buffered.Buffer.End);

            server.Abort(new ConnectionAbortedException("stop"));

            await closed;
            await sending.WaitAsync(s_hangGuard);
            await server.Transport.Input.CompleteAsync();
            await server.Transport.Output.CompleteAsync();
            await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        }
    }
}

public sealed class SocketsListenerConformanceTests : ListenerConformanceTests
{
    protected override IConnectionListenerFactory CreateFactory()
        => new SocketTransportFactory(Options.Create(new SocketTransportOptions()), NullLoggerFactory.Instance);
}

public sealed class IoUringListenerConformanceTests : ListenerConformanceTests
{
    protected override IConnectionListenerFactory CreateFactory()
        => new IoUringTransportFactory(Options.Create(new IoUringTransportOptions { LoopCount = 2 }), NullLoggerFactory.Instance);
}
