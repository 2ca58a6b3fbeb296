using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;
using IoUring.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.Tests.Net;

/// <summary>
/// Backpressure on the plain API: a connection whose application does not read stops receiving at
/// MaxReadBufferSize (within the bound docs/reliability.md states) and loses nothing when the reader catches up;
/// a paused connection still closes cleanly when its loop is gone. A reset while paused: <see cref="ReceiveResetTests"/>.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class BackpressureTests(ITestOutputHelper output)
{
    [Theory]
    [InlineData(16)]
    [InlineData(512)]
    public async Task A_fast_sender_to_a_reader_that_does_not_read_stays_under_the_memory_bound(int ringBuffers)
    {
        const int MaxRead = 64 * 1024, BufferSize = 8192;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = MaxRead,
            Loop = { BufferCount = ringBuffers, BufferSize = BufferSize },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint!);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        int blocksBefore = network.RentedMemoryBlocks;

        client.Blocking = false;
        byte[] chunk = new byte[64 * 1024];
        long sent = 0;
        var deadline = DateTime.UtcNow.AddSeconds(1);
        // Send until the kernel pushes back: the server must have stopped receiving.
        while (DateTime.UtcNow < deadline)
        {
            try
            {
                sent += client.Send(chunk);
            }
            catch (SocketException e) when (e.SocketErrorCode == SocketError.WouldBlock)
            {
                await Task.Delay(20);
            }
        }
        long buffered = server.BytesReceived; // all of it sits in Input: the application consumed nothing
        long memory = (long)(network.RentedMemoryBlocks - blocksBefore) * PinnedBlockMemoryPool.BlockSize;
        output.WriteLine($"ring {ringBuffers} x {BufferSize}: buffered {buffered} B, pipe memory {memory} B, sent {sent} B");
        // Receiving pauses at MaxReadBufferSize; what the multishot RECV had already taken from the socket still lands
        // in Input: at most one batch of completions, each of which holds a ring buffer (docs/reliability.md).
        long bound = MaxRead + (long)ringBuffers * BufferSize;
        Assert.InRange(buffered, MaxRead, bound);
        Assert.InRange(memory, buffered, buffered + 2 * PinnedBlockMemoryPool.BlockSize); // the pipe's blocks hold just that
        Assert.True(sent > buffered, "the sender was not pushed back");

        // The reader catches up: everything arrives, in order.
        client.Blocking = true;
        client.Shutdown(SocketShutdown.Send);
        long total = 0;
        while (true)
        {
            ReadResult result = await server.Input.ReadAsync();
            total += result.Buffer.Length;
            server.Input.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                break;
            }
        }
        Assert.Equal(sent, total);
        await server.DisposeAsync();
    }

    [Fact]
    public async Task Completing_a_paused_connections_pipes_after_the_network_is_disposed_does_not_throw()
    {
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, MaxReadBufferSize = 64 * 1024 });
        var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;

        // The peer sends more than MaxReadBufferSize and the application reads nothing: receiving pauses, with the
        // loop's continuation waiting on Input's flush.
        client.Blocking = false;
        byte[] chunk = new byte[64 * 1024];
        for (int i = 0; i < 16; i++)
        {
            try
            {
                client.Send(chunk);
            }
            catch (SocketException e) when (e.SocketErrorCode == SocketError.WouldBlock)
            {
                break;
            }
        }
        await Eventually.WaitForAsync(() => server.BytesReceived >= 64 * 1024);
        Assert.True(server.BytesReceived >= 64 * 1024, "receiving never reached the pause threshold");

        await listener.DisposeAsync();
        await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        Assert.True(network.Loops[0].Stopped.IsCompleted);

        // The pipes schedule their loop-side continuations on the stopped loop: that must not throw at the application.
        server.Input.Complete();
        server.Output.Complete();
        await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
    }
}
