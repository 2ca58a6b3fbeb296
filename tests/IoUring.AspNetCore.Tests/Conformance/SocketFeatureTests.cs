using System.Net;
using System.Net.Sockets;
using IoUring.AspNetCore.Internal;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.Extensions.Logging.Abstractions;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore.Tests.Conformance;

/// <summary>
/// The socket feature of a connection whose fd was closed and whose fd number now belongs to another connection: it
/// must fail (as Kestrel Sockets' disposed Socket does), never reach the other connection. Runs alone so that the
/// next fd the process opens is the one the closed connection released.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class SocketFeatureTests
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(10);

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Socket_of_a_closed_connection_never_reaches_the_connection_that_reuses_its_fd(bool takenWhileOpen)
    {
        // The runtime may open fds of its own at any moment (a pipe for a new thread) and take A's number first: try again.
        for (int attempt = 0; attempt < 5; attempt++)
        {
            if (await TryReuseAsync(takenWhileOpen))
            {
                return;
            }
        }
        Assert.Fail("B's connection never got A's fd number: the test could not arrange the reuse");
    }

    /// <returns>False when B did not get A's fd number (nothing was tested).</returns>
    private static async Task<bool> TryReuseAsync(bool takenWhileOpen)
    {
        await using var factory = new IoUringTransportFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);
        await using IConnectionListener listener = await factory.BindAsync(new IPEndPoint(IPAddress.Loopback, 0));
        using var clientA = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        using var clientB = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp); // its fd exists now
        ConnectionContext serverA = await ConnectAsync(listener, clientA);
        var connectionA = ((IoUringConnectionContext)serverA).Connection;
        int fdA = connectionA.FileDescriptor;
        Socket? before = takenWhileOpen ? serverA.Features.Get<IConnectionSocketFeature>()!.Socket : null;

        EndPoint endPointA = clientA.LocalEndPoint!;
        clientA.LingerState = new LingerOption(true, 0);
        clientA.Close(); // RST: the connection closes and releases its fd
        await connectionA.Closed.WaitAsync(s_hangGuard);
        // Fill the free fd numbers below A's, so that the next fd the process opens (B's accept) is A's number.
        var fillers = new List<Microsoft.Win32.SafeHandles.SafeFileHandle>();
        while (true)
        {
            var filler = File.OpenHandle("/dev/null");
            int number = (int)filler.DangerousGetHandle();
            Assert.True(number <= fdA, $"fd {fdA} was taken by something else");
            if (number == fdA)
            {
                filler.Dispose();
                break;
            }
            fillers.Add(filler);
        }
        ConnectionContext serverB = await ConnectAsync(listener, clientB);
        fillers.ForEach(f => f.Dispose());
        if (((IoUringConnectionContext)serverB).Connection.FileDescriptor != fdA)
        {
            serverB.Abort();
            await serverB.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
            await serverA.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
            return false;
        }

        EndPoint? answer = null;
        Exception? error = Record.Exception(() => answer = (before ?? serverA.Features.Get<IConnectionSocketFeature>()!.Socket).RemoteEndPoint);
        Assert.True(error is ObjectDisposedException or SocketException, $"A's socket answered {error?.GetType().Name ?? answer?.ToString()}; A's client was {endPointA}, B's is {clientB.LocalEndPoint}");

        serverB.Abort();
        await serverB.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        await serverA.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
        return true;
    }

    [Fact]
    public async Task Taking_and_disposing_the_socket_neither_closes_the_connection_nor_turns_its_fin_into_a_reset()
    {
        await using var factory = new IoUringTransportFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);
        await using IConnectionListener listener = await factory.BindAsync(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        ConnectionContext server = await ConnectAsync(listener, client);
        Socket taken = server.Features.Get<IConnectionSocketFeature>()!.Socket;
        Assert.Equal(client.LocalEndPoint, taken.RemoteEndPoint);
        taken.Dispose();
        Socket kept = server.Features.Get<IConnectionSocketFeature>()!.Socket; // the disposed one: the application's choice
        Assert.Same(taken, kept);

        Task writing = WriteAndCompleteAsync(server, 100_000);
        client.Shutdown(SocketShutdown.Send);
        int total = 0, n;
        byte[] buffer = new byte[1 << 16];
        while ((n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard)) > 0)
        {
            total += n; // a reset would throw here
        }
        Assert.Equal(100_000, total);
        await writing.WaitAsync(s_hangGuard);
        await server.DisposeAsync().AsTask().WaitAsync(s_hangGuard);
    }

    [Fact]
    public async Task A_socket_taken_while_open_keeps_the_close_graceful()
    {
        await using var factory = new IoUringTransportFactory(Options.Create(new IoUringTransportOptions { LoopCount = 1 }), NullLoggerFactory.Instance);
        await using IConnectionListener listener = await factory.BindAsync(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        ConnectionContext server = await ConnectAsync(listener, client);
        Socket taken = server.Features.Get<IConnectionSocketFeature>()!.Socket;
        Assert.True(taken.NoDelay);

        Task writing = WriteAndCompleteAsync(server, 4 << 20); // more than the kernel buffers: still queued at close
        client.Shutdown(SocketShutdown.Send);
        Task disposed = writing.ContinueWith(_ => server.DisposeAsync().AsTask(), TaskScheduler.Default).Unwrap();
        long total = 0;
        int n;
        byte[] buffer = new byte[1 << 16];
        while ((n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard)) > 0)
        {
            total += n; // a reset would throw here
        }
        Assert.Equal(4 << 20, total);
        await disposed.WaitAsync(s_hangGuard);
        Assert.Throws<ObjectDisposedException>(() => taken.RemoteEndPoint);
    }

    private static async Task WriteAndCompleteAsync(ConnectionContext server, int length)
    {
        await server.Transport.Output.WriteAsync(new byte[length]);
        await server.Transport.Output.CompleteAsync();
    }

    private static async Task<ConnectionContext> ConnectAsync(IConnectionListener listener, Socket client)
    {
        ValueTask<ConnectionContext?> accept = listener.AcceptAsync();
        await client.ConnectAsync(listener.EndPoint).WaitAsync(s_hangGuard);
        ConnectionContext? server = await accept.AsTask().WaitAsync(s_hangGuard);
        Assert.NotNull(server);
        return server;
    }
}
