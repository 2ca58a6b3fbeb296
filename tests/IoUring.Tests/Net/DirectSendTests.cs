using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>
/// Direct sends: a flush while the loop sleeps is sent from the flushing thread with send(2), not as a ring request.
/// What must hold: the bytes, the fallback to the ring for what the socket does not take, and the fd, which a close or a
/// stop must not close while an application thread is sending on it.
/// </summary>
public sealed class DirectSendTests
{
    private static readonly TimeSpan HangGuard = TimeSpan.FromSeconds(30);

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Small_round_trips_go_out_from_the_flushing_thread_only_when_direct_sends_are_on(bool directSends)
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, DirectSends = directSends });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        Task server = EchoTests.EchoServerAsync(listener);
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        await client.ConnectAsync(listener.LocalEndPoint);

        var random = new Random(7);
        byte[] sent = new byte[100];
        byte[] received = new byte[100];
        for (int i = 0; i < 200; i++)
        {
            random.NextBytes(sent);
            await client.SendAsync(sent);
            int total = 0;
            while (total < sent.Length)
            {
                int n = await client.ReceiveAsync(received.AsMemory(total)).AsTask().WaitAsync(HangGuard);
                Assert.NotEqual(0, n);
                total += n;
            }
            Assert.Equal(sent, received);
        }

        long direct = network.Loops[0].Counters.DirectSends;
        if (directSends)
        {
            Assert.True(direct > 0, "no send of 200 round trips went out from the flushing thread");
        }
        else
        {
            Assert.Equal(0, direct);
        }
        Assert.Equal(200 * 100, network.Loops[0].Counters.BytesSent);
    }

    [Fact]
    public async Task What_a_slow_peer_does_not_take_at_once_goes_on_through_the_ring_and_every_byte_arrives_in_order()
    {
        // No zero-copy threshold: every send may go direct, so sends larger than the socket's buffer end partial or in EAGAIN.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, ZeroCopySendThreshold = null });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        client.ReceiveBufferSize = 16 * 1024;
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection connection = (await listener.AcceptAsync())!;

        byte[] payload = RandomNumberGenerator.GetBytes(8 * 1024 * 1024);
        Task write = Task.Run(async () =>
        {
            var random = new Random(3);
            int offset = 0;
            while (offset < payload.Length)
            {
                int chunk = Math.Min(payload.Length - offset, random.Next(1, 200_000));
                await connection.Output.WriteAsync(payload.AsMemory(offset, chunk));
                offset += chunk;
            }
            await connection.Output.CompleteAsync();
        });

        using var received = new MemoryStream();
        byte[] buffer = new byte[64 * 1024];
        int reads = 0;
        while (true)
        {
            int n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(HangGuard);
            if (n == 0)
            {
                break;
            }
            received.Write(buffer, 0, n);
            if (++reads % 16 == 0)
            {
                await Task.Delay(1); // a slow reader: the socket's send buffer fills
            }
        }
        await write.WaitAsync(HangGuard);
        Assert.Equal(SHA256.HashData(payload), SHA256.HashData(received.ToArray()));
        Assert.True(network.Loops[0].Counters.DirectSends > 0, "no direct send was made");
        await connection.DisposeAsync().AsTask().WaitAsync(HangGuard);
    }

    [Fact]
    public async Task An_abort_does_not_close_the_fd_while_an_application_thread_is_sending_on_it()
    {
        using var held = new HeldDirectSend();
        await using var network = HeldNetwork(held);
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        (IoUringConnection connection, string socket, Task writer) = await HoldADirectSendAsync(listener, client, held);

        connection.Abort();
        await Task.Delay(300); // the close's cancels complete within this; only the held send keeps the fd now
        Assert.False(connection.Closed.IsCompleted, "the connection closed while a direct send was using its fd");
        Assert.Equal(socket, SocketOf(connection.FileDescriptor));

        held.Release();
        await connection.Closed.WaitAsync(HangGuard);
        await writer.WaitAsync(HangGuard);
        Assert.NotEqual(socket, SocketOf(connection.FileDescriptor)); // closed (or the number reused by another socket)
    }

    [Fact]
    public async Task A_stopping_loop_waits_for_a_direct_send_and_then_closes_its_fd()
    {
        using var held = new HeldDirectSend();
        IoUringNetwork network = HeldNetwork(held);
        IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        (IoUringConnection connection, string socket, Task writer) = await HoldADirectSendAsync(listener, client, held);

        // The loop itself stops (as after a ring failure), not the network, which would first wait for its connections.
        Task stop = network.Loops[0].StopAsync();
        await Task.Delay(300);
        Assert.False(network.Loops[0].Stopped.IsCompleted, "the loop stopped while a direct send was using a connection's fd");
        Assert.Equal(socket, SocketOf(connection.FileDescriptor));

        held.Release();
        await stop.WaitAsync(HangGuard);
        await connection.Closed.WaitAsync(HangGuard);
        await writer.WaitAsync(HangGuard);
        Assert.NotEqual(socket, SocketOf(connection.FileDescriptor));
        Assert.Equal(0, network.Loops[0].Counters.HandlerExceptions);
        await listener.DisposeAsync();
        network.Dispose();
    }

    private static IoUringNetwork HeldNetwork(HeldDirectSend held) => new(new IoUringNetworkOptions
    {
        LoopCount = 1,
        Loop = new() { Hooks = new() { BeforeDirectSend = held.Hook } },
    });

    /// <summary>Connects <paramref name="client"/>, accepts, and flushes until a direct send is held: the connection, its socket, the writer.</summary>
    private static async Task<(IoUringConnection, string, Task)> HoldADirectSendAsync(IoUringListener listener, Socket client, HeldDirectSend held)
    {
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection connection = (await listener.AcceptAsync())!;
        string socket = SocketOf(connection.FileDescriptor);
        Task writer = held.FlushUntilHeldAsync(connection);
        await held.Entered.WaitAsync(HangGuard);
        return (connection, socket, writer);
    }

    /// <summary>The socket an fd names now ("socket:[inode]"), or "" when the fd is closed.</summary>
    private static string SocketOf(int fd)
    {
        try
        {
            return new FileInfo($"/proc/self/fd/{fd}").LinkTarget ?? "";
        }
        catch (IOException)
        {
            return "";
        }
    }

    /// <summary>Holds the first direct send (on its application thread) until released.</summary>
    private sealed class HeldDirectSend : IDisposable
    {
        private readonly TaskCompletionSource _entered = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private readonly ManualResetEventSlim _release = new();
        private int _calls;

        public Task Entered => _entered.Task;

        public void Hook()
        {
            if (Interlocked.Increment(ref _calls) == 1)
            {
                _entered.TrySetResult();
                _release.Wait(HangGuard);
            }
        }

        public void Release() => _release.Set();

        /// <summary>Flushes small writes from a thread-pool thread until one goes direct (the loop must be asleep for that) and is held.</summary>
        public Task FlushUntilHeldAsync(IoUringConnection connection) => Task.Run(async () =>
        {
            byte[] data = new byte[64];
            while (!_entered.Task.IsCompleted)
            {
                connection.Output.Write(data);
                await connection.Output.FlushAsync();
                await Task.Delay(10);
            }
        });

        public void Dispose()
        {
            _release.Set();
            _release.Dispose();
        }
    }
}
