using System.Buffers;
using System.Collections.Concurrent;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Text;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Tests.Loops;
using IoUring.Tests.Support;
using Xunit.Abstractions;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Net;

/// <summary>The loop's provided buffer ring under failures and starvation: no buffer is lost, no receive spins.</summary>
public sealed class ReceiveBufferTests(ITestOutputHelper output)
{
    private static async Task<string> ReadAsync(IoUringConnection server, int length)
    {
        ReadResult read = await server.Input.ReadAtLeastAsync(length).AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        string text = Encoding.ASCII.GetString(read.Buffer.Slice(0, length).ToArray());
        server.Input.AdvanceTo(read.Buffer.GetPosition(length));
        return text;
    }

    [Fact]
    public async Task A_throw_while_writing_received_bytes_to_input_still_returns_the_buffer()
    {
        var reported = new ConcurrentQueue<Exception>();
        // One ring buffer: if the failing receive kept it, no connection of the loop could receive again.
        await using var network = new IoUringNetwork(
            new IoUringNetworkOptions { LoopCount = 1, Loop = { BufferCount = 1, BufferSize = 1024, UnhandledException = reported.Enqueue } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (failingClient, failing) = await LoopbackPairs.ConnectAsync(listener);
        var (otherClient, other) = await LoopbackPairs.ConnectAsync(listener);
        using (failingClient)
        using (otherClient)
        {
            // Input copies a small receive into a block of its own: that block's allocation fails.
            EventLoop loop = network.Loops[0];
            await LoopFailureTests.RunOnLoopAsync(loop, () => loop.ReceiveBuffers.Spares.FailRents = 1);
            await failingClient.SendAsync("doomed"u8.ToArray());
            // The connection whose input could not take the bytes is aborted, and the error reported.
            await Assert.ThrowsAsync<OutOfMemoryException>(async () => await failing.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5)));
            Assert.Contains(reported, e => e is OutOfMemoryException);

            await otherClient.SendAsync("alive"u8.ToArray());
            Assert.Equal("alive", await ReadAsync(other, 5));
        }
    }

    [Fact]
    public async Task Receives_do_not_spin_while_the_buffer_ring_stays_empty_and_resume_when_buffers_return()
    {
        const int Connections = 4;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { BufferCount = 2, BufferSize = 1024 } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        EventLoop loop = network.Loops[0];
        using var holder = new RecordingHandler(loop);
        var (reader, writer) = SocketPairs.Create();
        try
        {
            // Take both ring buffers and keep them: every receive of the loop now finds the ring empty.
            var held = new List<ushort>();
            for (int i = 0; i < 2; i++)
            {
                SocketPairs.Write(writer, (byte)'h');
                int fd = reader;
                await LoopFailureTests.RunOnLoopAsync(loop, () => holder.Submit(new io_uring_sqe { opcode = IORING_OP_RECV, fd = fd, flags = IOSQE_BUFFER_SELECT, buf_group = loop.ReceiveBuffers.UseGroup() }, (ulong)i));
                await holder.WaitForAsync(1);
            }
            Assert.All(holder.Completions, c => Assert.Equal(1, c.Result));
            held.AddRange(holder.Completions.Select(c => (ushort)(c.Flags >> IORING_CQE_BUFFER_SHIFT)));

            var pairs = new List<(Socket Client, IoUringConnection Server)>();
            for (int i = 0; i < Connections; i++)
            {
                pairs.Add(await LoopbackPairs.ConnectAsync(listener));
            }
            foreach ((Socket client, _) in pairs)
            {
                await client.SendAsync("hello"u8.ToArray());
            }
            await Eventually.WaitForAsync(() => loop.Counters.BufferRingExhaustions >= Connections);
            long exhaustions = loop.Counters.BufferRingExhaustions, syscalls = loop.Counters.Syscalls;
            var window = Stopwatch.StartNew();
            await Task.Delay(300);
            exhaustions = loop.Counters.BufferRingExhaustions - exhaustions;
            syscalls = loop.Counters.Syscalls - syscalls;
            double elapsedMs = window.Elapsed.TotalMilliseconds; // a loaded machine stretches the 300 ms delay
            output.WriteLine($"empty ring, {Connections} connections with data waiting: {exhaustions} ENOBUFS, {syscalls} io_uring_enter calls in {elapsedMs:F0} ms");
            // The backoff is 10 ms: about one ENOBUFS per connection per 10 ms. A receive re-armed at once after each
            // ENOBUFS hits hundreds per connection per millisecond (a busy loop: 276,339 in 300 ms before the fix).
            Assert.True(exhaustions < Connections * (elapsedMs / 2 + 10), $"{exhaustions} ENOBUFS in {elapsedMs:F0} ms: the receives spin");

            // The buffers come back: every connection gets its bytes.
            await LoopFailureTests.RunOnLoopAsync(loop, () => held.ForEach(loop.ReceiveBuffers.Recycle));
            foreach ((Socket client, IoUringConnection server) in pairs)
            {
                Assert.Equal("hello", await ReadAsync(server, 5));
                client.Dispose();
                server.Abort();
            }
        }
        finally
        {
            Libc.close(reader);
            Libc.close(writer);
        }
    }
}
