using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using IoUring.Buffers;
using IoUring.Net;
using IoUring.Tests.Support;
using Xunit.Abstractions;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Net;

/// <summary>
/// <see cref="IoUringConnection.Input"/>, which keeps the loop's ring buffers instead of copying them: the pipe reader's
/// contract (examined and consumed, cancellation, ReadAtLeast past the pause threshold, one read at a time), bytes held
/// by the reader never overwritten by later receives, and small receives not holding a block each.
/// </summary>
public sealed class InputTests(ITestOutputHelper output) : IAsyncLifetime
{
    private const int BufferSize = 8192, MaxRead = 64 * 1024;
    private IoUringNetwork _network = null!;
    private IoUringListener _listener = null!;

    public async Task InitializeAsync()
    {
        _network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = MaxRead,
            // Blocks given back are overwritten: a reader still seeing them would read 0xDD.
            Loop = { BufferCount = 16, BufferSize = BufferSize, Hooks = new() { PoisonReturnedMemory = true } },
        });
        _listener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        await Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        await _listener.DisposeAsync();
        await _network.DisposeAsync();
    }

    private static async Task SendAllAsync(Socket client, byte[] data, int seed)
    {
        var random = new Random(seed);
        for (int offset = 0; offset < data.Length;)
        {
            // Sizes from 1 byte to several ring buffers: small ones are copied, large ones kept.
            int size = Math.Min(data.Length - offset, random.Next(4) == 0 ? random.Next(1, 200) : random.Next(1, 40_000));
            offset += await client.SendAsync(data.AsMemory(offset, size));
        }
    }

    [Fact]
    public async Task Bytes_arrive_intact_whatever_the_reader_consumes_and_examines()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            byte[] sent = Pattern(4 << 20, seed: 1);
            Task sending = SendAllAsync(client, sent, seed: 2).ContinueWith(_ => client.Shutdown(SocketShutdown.Send));
            var received = new MemoryStream();
            var random = new Random(3);
            while (true)
            {
                ReadResult result = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                ReadOnlySequence<byte> buffer = result.Buffer;
                // Consume a random part, examine a random part beyond it (or everything). Past half the pause threshold
                // leave less than a quarter of it: a reader that examined everything and holds the threshold waits for
                // ever, with any pipe.
                long consume = result.IsCompleted ? buffer.Length
                    : buffer.Length >= MaxRead / 2 ? buffer.Length - random.Next(0, MaxRead / 4)
                    : random.Next(0, (int)buffer.Length + 1);
                foreach (ReadOnlyMemory<byte> segment in buffer.Slice(0, consume))
                {
                    received.Write(segment.Span);
                }
                SequencePosition examined = random.Next(2) == 0 ? buffer.End : buffer.GetPosition(consume + random.Next(0, (int)(buffer.Length - consume) + 1));
                server.Input.AdvanceTo(buffer.GetPosition(consume), examined);
                if (result.IsCompleted)
                {
                    break;
                }
            }
            await sending;
            Assert.Equal(sent.Length, received.Length);
            Assert.True(sent.AsSpan().SequenceEqual(received.ToArray()), "the bytes differ");
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task Bytes_arrive_intact_with_continuations_inline_on_the_loop()
    {
        // UnsafePreferInlineScheduling: the reader's continuations run on the loop thread, right after Input's lock is
        // released inside the receive's delivery; its AdvanceTo and next read happen there too.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = MaxRead,
            UnsafePreferInlineScheduling = true,
            Loop = { BufferCount = 16, BufferSize = BufferSize, Hooks = new() { PoisonReturnedMemory = true } },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        {
            byte[] sent = Pattern(2 << 20, seed: 8);
            Task sending = SendAllAsync(client, sent, seed: 9).ContinueWith(_ => client.Shutdown(SocketShutdown.Send));
            var received = new MemoryStream();
            while (true)
            {
                ReadResult result = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                foreach (ReadOnlyMemory<byte> segment in result.Buffer)
                {
                    received.Write(segment.Span);
                }
                server.Input.AdvanceTo(result.Buffer.End);
                if (result.IsCompleted)
                {
                    break;
                }
            }
            await sending;
            Assert.True(sent.AsSpan().SequenceEqual(received.ToArray()), "the bytes differ");
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task Bytes_a_reader_holds_are_not_overwritten_by_later_receives()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            byte[] first = Pattern(3 * BufferSize, seed: 4);
            await client.SendAsync(first);
            ReadResult held = await server.Input.ReadAtLeastAsync(first.Length).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(first.AsSpan().SequenceEqual(held.Buffer.Slice(0, first.Length).ToArray()));
            server.Input.AdvanceTo(held.Buffer.Start, held.Buffer.End); // examined, not consumed: still the reader's

            // The ring's 16 buffers go round several times while the first bytes are held.
            byte[] more = Pattern(4 * MaxRead, seed: 5);
            Task sending = client.SendAsync(more);
            ReadResult later = await server.Input.ReadAtLeastAsync(first.Length + more.Length).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(first.AsSpan().SequenceEqual(held.Buffer.Slice(0, first.Length).ToArray()), "held bytes changed");
            Assert.True(more.AsSpan().SequenceEqual(later.Buffer.Slice(first.Length, more.Length).ToArray()));
            server.Input.AdvanceTo(later.Buffer.End);
            await sending;
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_trickle_of_small_receives_does_not_hold_a_block_each()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            client.NoDelay = true;
            const int Sends = 300;
            for (int i = 0; i < Sends; i++)
            {
                await client.SendAsync(new[] { (byte)i });
                await Eventually.WaitForAsync(() => server.BytesReceived == i + 1); // one receive each
            }
            long held = server.Receiver.Input.HeldBytes;
            output.WriteLine($"{Sends} one-byte receives held in {held} B");
            Assert.Equal(BufferSize, held); // one block, the bytes copied into it
            ReadResult result = await server.Input.ReadAtLeastAsync(Sends).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal(Enumerable.Range(0, Sends).Select(i => (byte)i).ToArray(), result.Buffer.ToArray());
            server.Input.AdvanceTo(result.Buffer.End);
            Assert.Equal(0, server.Receiver.Input.HeldBytes); // all consumed: nothing held
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_read_waits_for_bytes_past_what_was_examined()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            await client.SendAsync("abc"u8.ToArray());
            ReadResult result = await server.Input.ReadAtLeastAsync(3).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            server.Input.AdvanceTo(result.Buffer.Start, result.Buffer.End);
            ValueTask<ReadResult> next = server.Input.ReadAsync();
            await Task.Delay(100);
            Assert.False(next.IsCompleted, "a read completed with nothing new past what was examined");
            await client.SendAsync("d"u8.ToArray());
            result = await next.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal("abcd"u8.ToArray(), result.Buffer.ToArray());

            // Examined only part: the next read returns at once with the same bytes.
            server.Input.AdvanceTo(result.Buffer.GetPosition(1), result.Buffer.GetPosition(2));
            result = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal("bcd"u8.ToArray(), result.Buffer.ToArray());
            server.Input.AdvanceTo(result.Buffer.End);
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task Reads_can_be_cancelled_and_reading_goes_on_after()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            ValueTask<ReadResult> pending = server.Input.ReadAsync();
            server.Input.CancelPendingRead();
            ReadResult canceled = await pending.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(canceled.IsCanceled);
            server.Input.AdvanceTo(canceled.Buffer.End);

            server.Input.CancelPendingRead(); // no read waiting: the next one returns canceled
            ReadResult next = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(next.IsCanceled);
            server.Input.AdvanceTo(next.Buffer.End);

            using var source = new CancellationTokenSource();
            ValueTask<ReadResult> withToken = server.Input.ReadAsync(source.Token);
            source.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await withToken.AsTask().WaitAsync(TimeSpan.FromSeconds(10)));

            await client.SendAsync("after"u8.ToArray());
            ReadResult result = await server.Input.ReadAtLeastAsync(5).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.False(result.IsCanceled);
            Assert.Equal("after"u8.ToArray(), result.Buffer.ToArray());
            server.Input.AdvanceTo(result.Buffer.End);
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task A_read_of_at_least_more_than_the_pause_threshold_completes()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            byte[] sent = Pattern(4 * MaxRead, seed: 6);
            Task sending = client.SendAsync(sent);
            ReadResult result = await server.Input.ReadAtLeastAsync(sent.Length).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(sent.AsSpan().SequenceEqual(result.Buffer.Slice(0, sent.Length).ToArray()));
            server.Input.AdvanceTo(result.Buffer.End);
            await sending;
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task With_a_read_buffer_of_one_byte_receiving_resumes_once_the_reader_consumes()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, MaxReadBufferSize = 1 });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            // The first write's bytes pause receiving; the second's come after, so the reader gets them only if
            // consuming the first resumes receiving.
            byte[] sent = Pattern(10, seed: 8);
            await client.SendAsync(sent.AsMemory(0, 5));
            var received = new MemoryStream();
            while (received.Length < sent.Length)
            {
                ReadResult result = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
                foreach (ReadOnlyMemory<byte> segment in result.Buffer)
                {
                    received.Write(segment.Span);
                }
                server.Input.AdvanceTo(result.Buffer.End);
                if (received.Length == 5)
                {
                    await client.SendAsync(sent.AsMemory(5));
                }
            }
            Assert.Equal(sent, received.ToArray());
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task Closing_in_the_middle_of_vectored_receives_gives_every_block_back(bool readerGoneFirst)
    {
        // Without the kernel's receive cap a receive that leaves bytes in the socket is followed by a RECVMSG into the
        // receiver's own spare blocks. Connections flooded by their peers are closed (aborted, or their reader completed
        // first) while such receives may be in flight: every block comes back once they are closed.
        const int Connections = 8;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = 1 << 20,
            Loop = { BufferCount = 16, BufferSize = BufferSize, Hooks = new() { Capabilities = KernelFeatures.WithReceiveCap(false) } },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        IoUring.Buffers.ReceiveBlockPool spares = network.Loops[0].ReceiveBuffers.Spares;
        var pairs = new List<(Socket Client, IoUringConnection Server)>();
        for (int i = 0; i < Connections; i++)
        {
            pairs.Add(await LoopbackPairs.ConnectAsync(listener));
        }
        byte[] chunk = Pattern(256 * 1024, seed: 3);
        Task[] flooding = pairs.Select(p => Task.Run(async () =>
        {
            try
            {
                while (true)
                {
                    await p.Client.SendAsync(chunk);
                }
            }
            catch (SocketException)
            {
                // the server closed: done
            }
            catch (ObjectDisposedException)
            {
            }
        })).ToArray();
        foreach ((Socket client, IoUringConnection server) in pairs)
        {
            ReadResult result = await server.Input.ReadAtLeastAsync(512 * 1024).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            server.Input.AdvanceTo(result.Buffer.End);
            if (readerGoneFirst)
            {
                server.Input.Complete();
                await Task.Delay(5);
            }
            server.Abort();
        }
        foreach ((Socket client, IoUringConnection server) in pairs)
        {
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            await server.DisposeAsync(); // the application is done with it: Input gives back what it held
            client.Dispose();
        }
        await Task.WhenAll(flooding).WaitAsync(TimeSpan.FromSeconds(10));
        await Eventually.WaitForAsync(() => spares.HeldBlocks == 0);
        output.WriteLine($"held {spares.HeldBlocks} blocks after closing; allocated {spares.Allocated}; loop CQEs {network.Loops[0].Counters.Cqes}");
        Assert.Equal(0, spares.HeldBlocks);
        Assert.Equal(0, network.Loops[0].Counters.ReceiveBuffersLost);
    }

    [Fact]
    public async Task After_a_burst_the_loop_keeps_few_idle_receive_blocks()
    {
        // Eight connections each hold 256 KiB unread (32 ring buffers' worth each, kept by Input: the ring took spares),
        // then their readers consume it all: within two seconds of rents the pool keeps the ring's count idle, not the
        // burst's peak.
        const int Ring = 16, Connections = 8, Each = 256 * 1024;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = 1 << 20,
            Loop = { BufferCount = Ring, BufferSize = BufferSize },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        IoUring.Buffers.ReceiveBlockPool spares = network.Loops[0].ReceiveBuffers.Spares;
        var pairs = new List<(Socket Client, IoUringConnection Server)>();
        for (int i = 0; i < Connections; i++)
        {
            pairs.Add(await LoopbackPairs.ConnectAsync(listener));
        }
        byte[] data = Pattern(Each, seed: 7);
        await Task.WhenAll(pairs.Select(p => p.Client.SendAsync(data)));
        await Eventually.WaitForAsync(() => pairs.All(p => p.Server.BytesReceived == Each));
        long peak = spares.HeldBlocks;
        foreach ((Socket client, IoUringConnection server) in pairs)
        {
            ReadResult result = await server.Input.ReadAtLeastAsync(Each).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            server.Input.AdvanceTo(result.Buffer.End);
        }
        long retainedBefore = spares.RetainedBlocks;
        // Trimming happens at rents, at most once a second, of what stayed idle that whole second: two rounds of a
        // small receive (copied into a block rented for it) a second apart.
        for (int round = 0; round < 2; round++)
        {
            await Task.Delay(1100);
            await pairs[0].Client.SendAsync(new byte[] { 1 });
            ReadResult small = await pairs[0].Server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            pairs[0].Server.Input.AdvanceTo(small.Buffer.End);
        }
        output.WriteLine($"held at the peak {peak} blocks; after: held {spares.HeldBlocks}, retained {retainedBefore} before trimming, {spares.RetainedBlocks} after, allocated {spares.Allocated}");
        Assert.True(peak >= Connections * Each / BufferSize / 2, $"only {peak} blocks held: Input did not keep the ring's buffers");
        Assert.Equal(0, spares.HeldBlocks);
        Assert.InRange(spares.RetainedBlocks, 0, Ring + 1);
        foreach ((Socket client, IoUringConnection server) in pairs)
        {
            client.Dispose();
            server.Abort();
        }
    }

    [Fact]
    public async Task A_stream_over_input_reads_on_after_a_cancelled_read()
    {
        // A canceled result needs no AdvanceTo (as with Pipe): PipeReader.AsStream throws at it without advancing.
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            Stream stream = server.Input.AsStream();
            server.Input.CancelPendingRead();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => _ = await stream.ReadAsync(new byte[16]));
            await client.SendAsync("hello"u8.ToArray());
            byte[] buffer = new byte[16];
            int read = await stream.ReadAsync(buffer).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal("hello", System.Text.Encoding.ASCII.GetString(buffer, 0, read));
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task Bytes_before_the_peers_FIN_stay_readable_after_a_later_abort()
    {
        // The input ended cleanly at the FIN: a failure or abort after it does not turn the bytes into an exception.
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            var peerClosed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            server.OnPeerClosed((_, _) => peerClosed.TrySetResult(), null);
            await client.SendAsync("hello"u8.ToArray());
            client.Shutdown(SocketShutdown.Send);
            await peerClosed.Task.WaitAsync(TimeSpan.FromSeconds(10));
            server.Abort(new IOException("a later failure"));
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            ReadResult result = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(result.IsCompleted);
            Assert.Equal("hello"u8.ToArray(), result.Buffer.ToArray());
            server.Input.AdvanceTo(result.Buffer.End);
        }
    }

    [Fact]
    public async Task A_failed_connection_gives_back_the_blocks_no_read_can_return_once_no_result_holds_them()
    {
        // Found by the diagnostic pools: connections aborted (or reset, or closed by their network's stop) that the
        // application never completed kept their unread blocks out of the pool for good, though every read throws.
        ReceiveBlockPool spares = _network.Loops[0].ReceiveBuffers.Spares;
        byte[] sent = Pattern(3 * BufferSize, seed: 7);
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            await client.SendAsync(sent);
            await Eventually.WaitForAsync(() => server.BytesReceived == sent.Length);
            server.Abort(new IOException("failed"));
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal(0, spares.HeldBlocks); // the application never read: nothing holds them
            await Assert.ThrowsAsync<IOException>(async () => await server.Input.ReadAsync());
        }

        (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            await client.SendAsync(sent);
            await Eventually.WaitForAsync(() => server.BytesReceived == sent.Length);
            ReadResult held = await server.Input.ReadAtLeastAsync(sent.Length);
            server.Abort(new IOException("failed"));
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            Assert.NotEqual(0, spares.HeldBlocks); // the reader still looks at them
            Assert.Equal(sent, held.Buffer.ToArray());
            server.Input.AdvanceTo(held.Buffer.Start);
            Assert.Equal(0, spares.HeldBlocks);
            await Assert.ThrowsAsync<IOException>(async () => await server.Input.ReadAsync());
        }
    }

    [Fact]
    public async Task Misuse_gets_a_clear_error()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            Assert.Throws<InvalidOperationException>(() => server.Input.AdvanceTo(default)); // no read yet
            ValueTask<ReadResult> pending = server.Input.ReadAsync();
            Assert.Throws<InvalidOperationException>(() => { _ = server.Input.ReadAsync(); }); // one read at a time
            await client.SendAsync("x"u8.ToArray());
            ReadResult result = await pending.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Throws<InvalidOperationException>(() => { _ = server.Input.ReadAsync(); }); // AdvanceTo first
            server.Input.AdvanceTo(result.Buffer.End);
            server.Input.Complete();
            Assert.Throws<InvalidOperationException>(() => { _ = server.Input.ReadAsync(); });
            await server.DisposeAsync();
        }
    }
}
