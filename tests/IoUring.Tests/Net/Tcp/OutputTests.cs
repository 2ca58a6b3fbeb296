using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Tests.Support;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Net;

/// <summary>
/// <see cref="IoUringConnection.Output"/>, a pipe writer whose flushed bytes are sent from the blocks they were written
/// to: the writer's contract (flush, backpressure at MaxWriteBufferSize, CancelPendingFlush, tokens, completion), bytes
/// never sent before their flush nor after their block went back (blocks are poisoned when returned), and an output with
/// nothing to send holding no memory.
/// </summary>
public sealed class OutputTests : IAsyncLifetime
{
    private const int BlockSize = 4096, MaxWrite = 64 * 1024;
    private IoUringNetwork _network = null!;
    private IoUringListener _listener = null!;

    public Task InitializeAsync()
    {
        _network = Network(inline: false, zeroCopy: false);
        _listener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        return Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        await _listener.DisposeAsync();
        await _network.DisposeAsync();
    }

    private static IoUringNetwork Network(bool inline, bool zeroCopy) => new(new IoUringNetworkOptions
    {
        LoopCount = 1,
        MaxWriteBufferSize = MaxWrite,
        UnsafePreferInlineScheduling = inline,
        // Zero-copy sends (their memory held until the kernel's notification) even over loopback, where the kernel copies.
        ZeroCopySendThreshold = zeroCopy ? BlockSize : null,
        // Small blocks: more of them per write; returned blocks are poisoned, so bytes sent after their return show up.
        Loop = { MemoryBlockSize = BlockSize, Hooks = new() { PoisonReturnedMemory = true, IgnoreZeroCopyCopied = zeroCopy } },
    });

    private static ConnectionOutput OutputOf(IoUringConnection connection) => (ConnectionOutput)connection.Output;

    private static async Task<byte[]> ReceiveAllAsync(Socket client)
    {
        var received = new MemoryStream();
        var buffer = new byte[64 * 1024];
        int n;
        while ((n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(20))) > 0)
        {
            received.Write(buffer, 0, n);
        }
        return received.ToArray();
    }

    /// <summary>
    /// Writes <paramref name="data"/> in random pieces: random size hints (past a block too, unless
    /// <paramref name="bulk"/>), partial advances, random flushes (with <paramref name="bulk"/> only once at least two
    /// blocks are unflushed, so that sends are large and all in pool blocks: the zero-copy case, whatever the timing).
    /// </summary>
    private static async Task WriteRandomlyAsync(PipeWriter output, byte[] data, int seed, bool bulk)
    {
        var random = new Random(seed);
        for (int offset = 0; offset < data.Length;)
        {
            int hint = random.Next(5) switch { 0 => 0, 1 => random.Next(1, 100), 2 when !bulk => BlockSize * 3, _ => random.Next(1, BlockSize) };
            Memory<byte> memory = output.GetMemory(hint);
            Assert.True(memory.Length >= Math.Max(hint, 1));
            int size = Math.Min(data.Length - offset, random.Next(1, memory.Length + 1));
            data.AsMemory(offset, size).CopyTo(memory);
            output.Advance(size);
            offset += size;
            Assert.True(output.UnflushedBytes > 0);
            if (bulk ? output.UnflushedBytes >= 2 * BlockSize : random.Next(3) == 0)
            {
                FlushResult flushed = await output.FlushAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                Assert.False(flushed.IsCompleted || flushed.IsCanceled, $"completed {flushed.IsCompleted}, canceled {flushed.IsCanceled}");
                Assert.Equal(0, output.UnflushedBytes);
            }
        }
    }

    [Theory]
    [InlineData(false, false)]
    [InlineData(true, false)]
    [InlineData(false, true)]
    public async Task Bytes_written_in_random_pieces_arrive_intact(bool inline, bool zeroCopy)
    {
        await using IoUringNetwork network = Network(inline, zeroCopy);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        {
            byte[] sent = Pattern(3 << 20, seed: 1);
            Task<byte[]> receiving = ReceiveAllAsync(client);
            // On a thread-pool thread: with inline scheduling a flush's continuation runs on the loop, as the app's would.
            await Task.Run(() => WriteRandomlyAsync(server.Output, sent, seed: 2, bulk: zeroCopy));
            await server.Output.CompleteAsync(); // FIN after the data
            byte[] received = await receiving;
            EchoTests.AssertSameBytes(sent, received);
            if (zeroCopy)
            {
                Assert.True(server.ZeroCopySends > 0, "no send went zero-copy");
            }
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task Nothing_is_sent_before_its_flush()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        await using (server)
        {
            byte[] first = Pattern(10_000, seed: 3);
            server.Output.Write(first);
            Assert.Equal(first.Length, server.Output.UnflushedBytes);
            await Task.Delay(200);
            Assert.Equal(0, client.Available);
            Assert.Equal(0, server.BytesSent);
            await server.Output.FlushAsync();
            var buffer = new byte[first.Length];
            int received = 0;
            while (received < buffer.Length)
            {
                received += await client.ReceiveAsync(buffer.AsMemory(received)).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            }
            Assert.Equal(first, buffer);
        }
    }

    [Fact]
    public async Task A_flush_waits_at_the_pause_threshold_until_the_peer_reads_below_half_of_it()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client) // disposed first: a failure must not leave the server's graceful close waiting on a peer that does not read
        {
            ShrinkSocketBuffers(client, server);
            (ValueTask<FlushResult> flush, _) = await FillUntilAFlushWaitsAsync(server.Output);
            Assert.False(flush.IsCompleted, "no flush waited");
            Assert.True(OutputOf(server).Unsent >= MaxWrite / 2); // a waiting flush: at least the resume threshold unsent
            await Task.Delay(200);
            Assert.False(flush.IsCompleted);

            // Reading drains the kernel's buffers, the loop sends, and the flush completes below half the threshold.
            var buffer = new byte[256 * 1024];
            long received = 0;
            Task<FlushResult> flushed = flush.AsTask();
            while (!flushed.IsCompleted)
            {
                received += await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            }
            FlushResult result = await flushed;
            Assert.False(result.IsCompleted || result.IsCanceled);
            Assert.True(OutputOf(server).Unsent < MaxWrite / 2);
        }
    }

    [Fact]
    public async Task CancelPendingFlush_ends_a_waiting_flush_or_else_the_next_one_and_a_token_cancels_one()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client) // disposed first: a failure must not leave the server's graceful close waiting on a peer that does not read
        {
            // Not waiting: the next flush returns IsCanceled (as a pipe's), the one after it is plain.
            server.Output.CancelPendingFlush();
            Assert.True((await server.Output.FlushAsync()).IsCanceled);
            Assert.False((await server.Output.FlushAsync()).IsCanceled);

            ShrinkSocketBuffers(client, server);
            (ValueTask<FlushResult> flush, long written) = await FillUntilAFlushWaitsAsync(server.Output);
            server.Output.CancelPendingFlush();
            FlushResult canceled = await flush.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            if (!canceled.IsCanceled)
            {
                // The flush completed by itself just before the cancel (the kernel took more: under qemu's emulation the
                // sends can still be moving 300 ms after a flush began waiting), so the cancel is the next flush's.
                Assert.True((await server.Output.FlushAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10))).IsCanceled);
            }

            using var cts = new CancellationTokenSource();
            server.Output.Write(new byte[MaxWrite]);
            written += MaxWrite;
            ValueTask<FlushResult> tokenFlush = server.Output.FlushAsync(cts.Token);
            Assert.False(tokenFlush.IsCompleted);
            cts.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => tokenFlush.AsTask().WaitAsync(TimeSpan.FromSeconds(10)));

            // The bytes of the cancelled flushes still go, in order, once the peer reads.
            server.Output.Complete();
            byte[] received = await ReceiveAllAsync(client);
            Assert.Equal(written, received.Length);
        }
    }

    /// <summary>Small fixed socket buffers (no autotuning): the kernel takes little before sends stop, and no more later.</summary>
    private static void ShrinkSocketBuffers(Socket client, IoUringConnection server)
    {
        client.ReceiveBufferSize = 4096;
        server.Socket.SendBufferSize = 4096;
    }

    /// <summary>
    /// Writes and flushes until a flush stays waiting (the peer's and our socket buffers full, the unsent bytes at the
    /// threshold): a flush that waits only until the loop's send in flight completes goes on to the next write.
    /// </summary>
    private static async Task<(ValueTask<FlushResult> Flush, long Written)> FillUntilAFlushWaitsAsync(PipeWriter output)
    {
        var chunk = new byte[16 * 1024];
        long written = 0;
        for (int i = 0; i < 10_000; i++)
        {
            output.Write(chunk);
            written += chunk.Length;
            ValueTask<FlushResult> flush = output.FlushAsync();
            if (!flush.IsCompleted)
            {
                Task<FlushResult> waiting = flush.AsTask();
                if (await Task.WhenAny(waiting, Task.Delay(300)) != waiting)
                {
                    return (new ValueTask<FlushResult>(waiting), written);
                }
                await waiting;
            }
        }
        throw new InvalidOperationException("No flush waited.");
    }

    [Fact]
    public async Task A_peer_reset_completes_a_waiting_flush_and_later_ones_and_gives_the_blocks_back()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        {
            ShrinkSocketBuffers(client, server);
            (ValueTask<FlushResult> flush, _) = await FillUntilAFlushWaitsAsync(server.Output);
            Assert.True(OutputOf(server).BufferedBlocks > 0);
            client.LingerState = new LingerOption(true, 0);
            client.Dispose(); // RST
            FlushResult result = await flush.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(result.IsCompleted);
            await Eventually.WaitForAsync(() => OutputOf(server).BufferedBlocks == 0);
            server.Output.Write(new byte[100]);
            Assert.True((await server.Output.FlushAsync()).IsCompleted);
            Assert.Equal(0, OutputOf(server).BufferedBlocks); // dropped at the flush
        }
    }

    [Fact]
    public async Task An_output_with_nothing_to_send_holds_no_block_and_one_being_written_keeps_its_block()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        await using (server)
        {
            var buffer = new byte[BlockSize * 4];
            for (int round = 0; round < 20; round++)
            {
                byte[] response = Pattern(round * 700 + 1, seed: round);
                server.Output.Write(response);
                await server.Output.FlushAsync();
                int received = 0;
                while (received < response.Length)
                {
                    received += await client.ReceiveAsync(buffer.AsMemory(received)).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
                }
                Assert.Equal(response, buffer[..response.Length]);
                await Eventually.WaitForAsync(() => OutputOf(server).BufferedBlocks == 0);
            }

            // A write in progress (memory asked for, not yet flushed) keeps its block while earlier bytes go.
            Memory<byte> memory = server.Output.GetMemory(10);
            Assert.Equal(1, OutputOf(server).BufferedBlocks);
            "abc"u8.CopyTo(memory.Span);
            server.Output.Advance(3);
            await Task.Delay(100);
            Assert.Equal(1, OutputOf(server).BufferedBlocks);
            await server.Output.FlushAsync();
            int got = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal("abc"u8.ToArray(), buffer[..got]);
            await Eventually.WaitForAsync(() => OutputOf(server).BufferedBlocks == 0);
        }
    }

    [Fact]
    public async Task Writing_after_complete_throws_and_complete_with_an_error_resets_the_connection()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        await using (server)
        {
            server.Output.Write(new byte[10]);
            server.Output.Complete(new InvalidOperationException("the application failed"));
            Assert.Throws<InvalidOperationException>(() => server.Output.GetMemory());
            await server.Output.FlushAsync(); // as a pipe's: a flush after Complete does not throw (a stream's flush racing its dispose)
            // The peer must not take the stream for complete: RST (no data, no FIN).
            var buffer = new byte[100];
            SocketException reset = await Assert.ThrowsAsync<SocketException>(
                async () => await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10)));
            Assert.Equal(SocketError.ConnectionReset, reset.SocketErrorCode);
        }
    }

    [Fact]
    public async Task With_a_write_buffer_of_one_byte_a_flush_completes_once_its_bytes_are_sent()
    {
        // Review (helper): the resume threshold was half of 1 = 0, and "unsent < 0" never holds: the flush hung for ever.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, MaxWriteBufferSize = 1 });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            server.Output.Write("hello"u8);
            ValueTask<FlushResult> flush = server.Output.FlushAsync();
            var buffer = new byte[16];
            int n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal(5, n);
            FlushResult result = await flush.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.False(result.IsCanceled || result.IsCompleted);
        }
    }

    [Fact]
    public async Task A_pool_that_gives_what_is_asked_for_still_gets_asked_for_whole_segments()
    {
        // Review (helper): GetMemory() rented 1 byte from such a pool (MemoryPool<byte>.Shared gave 16-byte arrays), so a
        // 64 KiB write took 4,096 segments and each SENDMSG carried 1 KiB. A pipe asks for its minimum segment size.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, MemoryPool = MemoryPool<byte>.Shared });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            int first = server.Output.GetMemory().Length;
            server.Output.Write(new byte[64 * 1024]);
            int blocks = OutputOf(server).BufferedBlocks;
            Assert.True(blocks <= 16, $"GetMemory() gave {first} bytes; 64 KiB written is held in {blocks} blocks");
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_second_flush_while_one_waits_joins_it_as_with_a_pipe(bool cancel)
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client) // disposed first: a failure must not leave the server's graceful close waiting on a peer that does not read
        {
            ShrinkSocketBuffers(client, server);
            (ValueTask<FlushResult> first, long written) = await FillUntilAFlushWaitsAsync(server.Output);
            server.Output.Write(new byte[100]);
            written += 100;
            // Joins the waiting flush (it threw "already in progress"): awaiting both at once is refused, as with a pipe,
            // but each awaited in turn has the outcome.
            ValueTask<FlushResult> second = server.Output.FlushAsync();
            Assert.False(second.IsCompleted);
            Task<FlushResult> flushed = first.AsTask();
            long received = 0;
            if (cancel)
            {
                server.Output.CancelPendingFlush();
            }
            else
            {
                var buffer = new byte[256 * 1024];
                while (!flushed.IsCompleted)
                {
                    received += await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
                }
            }
            Assert.Equal(cancel, (await flushed.WaitAsync(TimeSpan.FromSeconds(10))).IsCanceled);
            FlushResult joined = await second.AsTask().WaitAsync(TimeSpan.FromSeconds(5));
            Assert.False(joined.IsCompleted);
            Assert.Equal(cancel, joined.IsCanceled);
            server.Output.Complete();
            Assert.Equal(written, received + (await ReceiveAllAsync(client)).Length);
        }
    }

    [Fact]
    public async Task A_joined_flush_is_cancelled_by_its_own_token_as_with_a_pipe()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client) // disposed first: the server's close must not wait on a peer that does not read
        {
            ShrinkSocketBuffers(client, server);
            (ValueTask<FlushResult> first, _) = await FillUntilAFlushWaitsAsync(server.Output);
            using var cancellation = new CancellationTokenSource();
            // A pipe registers every flush's token, so the second flush's token cancels the wait both share.
            ValueTask<FlushResult> second = server.Output.FlushAsync(cancellation.Token);
            Assert.False(second.IsCompleted);
            Task<FlushResult> flushed = first.AsTask();
            cancellation.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => flushed.WaitAsync(TimeSpan.FromSeconds(5)));
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => second.AsTask().WaitAsync(TimeSpan.FromSeconds(5)));
        }
    }

    [Fact]
    public async Task A_joined_flush_awaited_after_a_later_flush_began_has_the_outcome_of_the_wait_it_joined()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client) // disposed first: the server's close must not wait on a peer that does not read
        {
            ShrinkSocketBuffers(client, server);
            (ValueTask<FlushResult> first, _) = await FillUntilAFlushWaitsAsync(server.Output);
            ValueTask<FlushResult> joined = server.Output.FlushAsync();
            Assert.False(joined.IsCompleted);
            server.Output.CancelPendingFlush(); // ends the wait both share
            Assert.True((await first.AsTask().WaitAsync(TimeSpan.FromSeconds(5))).IsCanceled);

            // A later flush waits (the peer still reads nothing) before the joined one is awaited: 1 MiB, far past the
            // pause threshold, whatever the kernel took meanwhile (100 bytes completed at once under load in CI).
            server.Output.Write(new byte[1024 * 1024]);
            ValueTask<FlushResult> later = server.Output.FlushAsync();
            Assert.False(later.IsCompleted);

            FlushResult outcome = await joined.AsTask().WaitAsync(TimeSpan.FromSeconds(5));
            Assert.True(outcome.IsCanceled);
            Assert.False(later.IsCompleted);
            server.Output.CancelPendingFlush();
            Assert.True((await later.AsTask().WaitAsync(TimeSpan.FromSeconds(5))).IsCanceled);
        }
    }

    [Fact]
    public async Task A_write_larger_than_a_block_gets_a_pinned_large_block_of_the_loop_given_back_once_sent()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        await using (server)
        {
            // Kestrel's SendFileAsync on the loop asks for 64 KiB: an ArrayPool array before, which 64 connections
            // sending files outran (each response allocated new arrays); now a block of the loop's large pool.
            Memory<byte> memory = server.Output.GetMemory(40_000);
            Assert.True(MemoryMarshal.TryGetMemoryManager<byte, PinnedBlock>(memory, out PinnedBlock? block));
            Assert.Same(server.Loop.LargeBlockPool, block!.Region.Pool);
            Assert.Equal(EventLoop.LargeBlockSize, memory.Length);
            byte[] sent = Pattern(memory.Length, seed: 7);
            sent.CopyTo(memory);
            server.Output.Advance(sent.Length);
            await server.Output.FlushAsync();
            var received = new byte[sent.Length];
            int total = 0;
            while (total < sent.Length)
            {
                total += await client.ReceiveAsync(received.AsMemory(total));
            }
            Assert.Equal(sent, received);
            await Eventually.WaitForAsync(() => server.Loop.LargeBlockPool.RentedBlocks == 0);
        }
    }

    [Fact]
    public async Task An_empty_flush_after_GetMemory_leaves_no_block_held()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        await using (server)
        {
            _ = server.Output.GetMemory();
            Assert.Equal(1, OutputOf(server).BufferedBlocks);
            await server.Output.FlushAsync(); // nothing advanced: nothing to send, and no write in progress
            Assert.Equal(0, OutputOf(server).BufferedBlocks);
        }
    }

    // ---- Large writes sent from the caller's memory (WriteAsync at or past the pause threshold) ----

    [Fact]
    public async Task A_large_write_is_sent_from_the_callers_memory_and_completes_once_all_of_it_is_sent()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client)
        {
            server.Socket.SendBufferSize = 4096; // the peer's receive buffer takes a few hundred KiB, then sends stop
            byte[] data = Pattern(1 << 20, seed: 3);
            ValueTask<FlushResult> write = server.Output.WriteAsync(data);
            await Task.Delay(200);
            Assert.False(write.IsCompleted, "the write completed while most of it could not be sent");
            // No copy: the output holds the caller's memory as one segment, not 256 blocks of its own.
            Assert.Equal(1, OutputOf(server).BufferedBlocks);

            server.Socket.SendBufferSize = 1 << 20;
            Task<byte[]> receiving = ReceiveAllAsync(client);
            FlushResult result = await write.AsTask().WaitAsync(TimeSpan.FromSeconds(20));
            Assert.False(result.IsCompleted || result.IsCanceled);
            Assert.Equal(0, OutputOf(server).Unsent); // completes once all of it is sent, not at the resume threshold
            Assert.Equal(0, OutputOf(server).BufferedBlocks);
            await server.Output.CompleteAsync();
            EchoTests.AssertSameBytes(data, await receiving);
        }
    }

    [Theory]
    [InlineData(false)]
    [InlineData(true)]
    public async Task A_cancelled_large_write_keeps_its_unsent_bytes_and_leaves_the_callers_memory_alone(bool token)
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client)
        {
            server.Socket.SendBufferSize = 4096; // the peer's receive buffer takes a few hundred KiB, then sends stop
            byte[] head = Pattern(1000, seed: 4);
            head.CopyTo(server.Output.GetSpan(head.Length));
            server.Output.Advance(head.Length); // unflushed: goes before the large write
            byte[] data = Pattern(1 << 20, seed: 5);
            byte[] expected = [.. head, .. data];
            using var cts = new CancellationTokenSource();
            ValueTask<FlushResult> write = server.Output.WriteAsync(data, token ? cts.Token : default);
            await Task.Delay(200);
            Assert.False(write.IsCompleted);
            if (token)
            {
                cts.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => write.AsTask().WaitAsync(TimeSpan.FromSeconds(10)));
            }
            else
            {
                server.Output.CancelPendingFlush();
                Assert.True((await write.AsTask().WaitAsync(TimeSpan.FromSeconds(10))).IsCanceled);
            }
            // The caller owns its memory again: what it writes there now must not reach the peer.
            Array.Fill(data, (byte)0xEE);
            Assert.True(OutputOf(server).Unsent > 0);
            server.Socket.SendBufferSize = 1 << 20;

            // The unsent bytes were kept (copied) and go in order, then the writer goes on as usual.
            byte[] tail = Pattern(3000, seed: 6);
            server.Output.Write(tail);
            Task<byte[]> receiving = ReceiveAllAsync(client);
            Assert.False((await server.Output.FlushAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(20))).IsCanceled);
            await server.Output.CompleteAsync();
            EchoTests.AssertSameBytes([.. expected, .. tail], await receiving);
        }
    }

    [Fact]
    public async Task Large_and_small_writes_interleaved_arrive_in_order_and_each_large_one_leaves_no_block_behind()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client)
        {
            Task<byte[]> receiving = ReceiveAllAsync(client);
            var expected = new MemoryStream();
            var random = new Random(7);
            for (int i = 0; i < 40; i++)
            {
                byte[] piece = Pattern(random.Next(3) == 0 ? random.Next(MaxWrite, 300_000) : random.Next(1, 5000), seed: 100 + i);
                expected.Write(piece);
                if (piece.Length >= MaxWrite)
                {
                    Assert.False((await server.Output.WriteAsync(piece).AsTask().WaitAsync(TimeSpan.FromSeconds(20))).IsCompleted);
                    Array.Fill(piece, (byte)0xEE); // the write completed: its memory is the caller's again
                }
                else
                {
                    server.Output.Write(piece); // sometimes left unflushed until the next large write
                    if (random.Next(2) == 0)
                    {
                        await server.Output.FlushAsync();
                    }
                }
            }
            await server.Output.CompleteAsync();
            EchoTests.AssertSameBytes(expected.ToArray(), await receiving);
        }
    }

    [Fact]
    public async Task A_peer_reset_completes_a_waiting_large_write()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        {
            server.Socket.SendBufferSize = 4096; // the peer's receive buffer takes a few hundred KiB, then sends stop
            ValueTask<FlushResult> write = server.Output.WriteAsync(Pattern(1 << 20, seed: 8));
            await Task.Delay(200);
            Assert.False(write.IsCompleted);
            client.LingerState = new LingerOption(true, 0);
            client.Dispose(); // RST
            Assert.True((await write.AsTask().WaitAsync(TimeSpan.FromSeconds(10))).IsCompleted);
            await Eventually.WaitForAsync(() => OutputOf(server).BufferedBlocks == 0);
        }
    }

    [Fact]
    public async Task Large_writes_cancelled_at_random_moments_lose_no_byte_and_never_send_the_callers_later_bytes()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await using (server)
        using (client)
        {
            Task<byte[]> receiving = ReceiveAllAsync(client);
            var expected = new MemoryStream();
            var random = new Random(9);
            byte[] buffer = new byte[256 * 1024]; // reused by every write, as a caller's buffer is
            int cancelled = 0;
            for (int i = 0; i < 200; i++)
            {
                new Random(1000 + i).NextBytes(buffer);
                expected.Write(buffer);
                using var cts = new CancellationTokenSource();
                ValueTask<FlushResult> write = server.Output.WriteAsync(buffer, cts.Token);
                if (random.Next(2) == 0)
                {
                    Thread.SpinWait(random.Next(20_000)); // a cancel before, while or after the kernel sends
                    if (random.Next(2) == 0)
                    {
                        cts.Cancel();
                    }
                    else
                    {
                        server.Output.CancelPendingFlush();
                    }
                }
                try
                {
                    FlushResult result = await write.AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                    Assert.False(result.IsCompleted);
                    cancelled += result.IsCanceled ? 1 : 0;
                }
                catch (OperationCanceledException)
                {
                    cancelled++;
                }
            }
            Array.Fill(buffer, (byte)0xEE);
            await server.Output.CompleteAsync();
            EchoTests.AssertSameBytes(expected.ToArray(), await receiving);
            Assert.True(cancelled > 0, "no write was cancelled before it completed");
        }
    }

    [Fact]
    public async Task Aborting_in_the_inline_continuation_of_a_cancelled_large_write_sends_nothing_after_the_abort()
    {
        // Inline continuations: the cancelled write's continuation runs on the loop thread, inside the sender's SendNext.
        await using IoUringNetwork network = Network(inline: true, zeroCopy: false);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        var (otherClient, other) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        using (otherClient)
        await using (other)
        {
            server.Socket.SendBufferSize = 4096; // the peer's receive buffer takes a few hundred KiB, then sends stop
            byte[] data = Pattern(1 << 20, seed: 1);
            byte[] secret = new byte[1 << 20];
            Array.Fill(secret, (byte)0x5A); // another connection's bytes: must never reach server's peer
            using var cts = new CancellationTokenSource();
            bool ranOnLoop = false;

            async Task WriteThenAbortAsync()
            {
                try
                {
                    await server.Output.WriteAsync(data, cts.Token);
                }
                catch (OperationCanceledException)
                {
                    ranOnLoop = server.Loop.IsOnLoopThread;  // inline: inside ConnectionOutput.TakeWork's completion.Run()
                    server.Abort(); // on the loop thread: the close runs now, the sender finishes, the output releases its segments
                    // Another writer of the network rents segments meanwhile (the pool is shared, LIFO).
                    other.Output.Write(secret);
                    _ = other.Output.FlushAsync();
                }
            }

            Task writing = WriteThenAbortAsync();
            await Task.Delay(200);
            Assert.False(writing.IsCompleted);
            cts.Cancel();
            await writing.WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(ranOnLoop, "the continuation did not run inline on the loop");

            // An aborted connection closes at once (RST) even though its peer does not read.
            Task closed = server.Closed;
            bool closedInTime = await Task.WhenAny(closed, Task.Delay(3000)) == closed;

            // What did the peer get?
            var received = new MemoryStream();
            var buffer = new byte[64 * 1024];
            try
            {
                int n;
                while ((n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(5))) > 0)
                {
                    received.Write(buffer, 0, n);
                }
            }
            catch (SocketException)
            {
                // the RST
            }
            catch (TimeoutException)
            {
            }
            await closed.WaitAsync(TimeSpan.FromSeconds(10));
            // A send that completes after the sender finished consumes bytes the output no longer has.
            Assert.True(((ConnectionOutput)server.Output).Unsent >= 0, $"Unsent {((ConnectionOutput)server.Output).Unsent}: a send was submitted after the abort finished the sender");
            // Whatever the peer got is a prefix of what this connection wrote: never another connection's bytes.
            byte[] got = received.ToArray();
            for (int i = 0; i < got.Length; i++)
            {
                if (i >= data.Length || got[i] != data[i])
                {
                    Assert.Fail($"server's peer received a foreign byte 0x{got[i]:X2} at {i} of {got.Length} (the other connection's are 0x5A)");
                }
            }
            Assert.True(closedInTime, "the aborted connection did not close: a send submitted after the abort is in flight");
        }
    }
}
