using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Net;

/// <summary>
/// Sends made by the flushing thread itself (<see cref="ConnectionOutput"/>): while the loop sleeps and no send is in
/// flight, a flush sends its bytes with one non-blocking send(2) instead of waking the loop. Each test runs with them
/// and, as the baseline, without (every send through the ring): the observable results must be the same.
/// </summary>
[Collection(QuietThreadPoolCollection.Name)]
public sealed class CallerSendTests
{
    private static IoUringNetwork Network(bool callerSends, FaultInjector? faults = null) => new(new IoUringNetworkOptions
    {
        LoopCount = 1,
        Loop = { Hooks = new() { NoCallerSends = !callerSends, Faults = faults, PoisonReturnedMemory = true } },
    });

    /// <summary>
    /// Waits until a flush of <paramref name="server"/>'s would send by itself: the loop asleep and the thread pool idle
    /// (else the flush posts: ConnectionOutput). The output's first block comes from a new slab of the pool, which the loop
    /// registers with its ring (a post that wakes it), so one is rented first.
    /// </summary>
    private static async Task UntilTheNextFlushCanSendItselfAsync(IoUringNetwork network, IoUringConnection server)
    {
        server.Output.GetMemory();
        await server.Output.FlushAsync();
        await Eventually.WaitForAsync(() => network.Loops[0].IsSleeping && ThreadPool.PendingWorkItemCount == 0);
    }

    [Theory]
    [InlineData(true, 64)]
    [InlineData(false, 64)]
    [InlineData(true, 32 * 1024)] // above the zero-copy threshold: sent by the ring until loopback's copying reverts it
    [InlineData(false, 32 * 1024)]
    public async Task Request_response_rounds_are_sent_by_the_flushing_thread_instead_of_waking_the_loop(bool callerSends, int size)
    {
        const int Rounds = 200;
        if (size >= IoUringNetworkOptions.DefaultZeroCopySendThreshold && !IoUringCapabilities.Current.HasZeroCopyReportUsage)
        {
            return; // before 6.2 the kernel cannot say it copied: the connection stays zero-copy, so the ring sends these
        }
        await using IoUringNetwork network = Network(callerSends);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        await client.ConnectAsync(listener.LocalEndPoint);
        var loop = network.Loops[0];
        long sendsBefore = loop.Counters.CallerSends, wakeupsBefore = loop.Counters.Wakeups, bytesBefore = loop.Counters.BytesSent;

        byte[] reply = new byte[size];
        for (int round = 0; round < Rounds; round++)
        {
            byte[] message = Pattern(size, seed: round);
            await client.SendAsync(message);
            int received = 0;
            while (received < reply.Length)
            {
                int n = await client.ReceiveAsync(reply.AsMemory(received)).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
                Assert.NotEqual(0, n);
                received += n;
            }
            Assert.Equal(message, reply);
        }

        // The last reply may reach the client before the loop has handled its send's completion (which counts it).
        await Eventually.WaitForAsync(() => loop.Counters.BytesSent - bytesBefore == Rounds * (long)size);
        long sends = loop.Counters.CallerSends - sendsBefore, wakeups = loop.Counters.Wakeups - wakeupsBefore;
        Assert.Equal(Rounds * (long)size, loop.Counters.BytesSent - bytesBefore); // the caller's bytes are counted too
        if (callerSends)
        {
            // Between rounds the loop sleeps (the client waits for the reply), so the echo's flush sends the reply itself.
            Assert.True(sends >= Rounds / 2, $"{sends} caller sends in {Rounds} rounds");
            Assert.True(wakeups < Rounds / 2, $"{wakeups} wake-ups in {Rounds} rounds");
        }
        else
        {
            Assert.Equal(0, sends);
            Assert.True(wakeups >= Rounds / 2, $"{wakeups} wake-ups in {Rounds} rounds: the baseline should wake the loop per reply");
        }
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Sends_cut_short_by_a_full_socket_buffer_go_on_through_the_ring_in_order(bool callerSends)
    {
        await using IoUringNetwork network = Network(callerSends);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            client.ReceiveBufferSize = 4096;
            server.Socket.SendBufferSize = 4096;
            byte[] data = Pattern(256 * 1024, seed: 3);
            // Each write waits until the sender has handed everything before it to the kernel (so it waits for the next
            // flush) and the loop sleeps, while the slow reader below keeps the socket buffers full: the flush's own send
            // then finds room for part of it only, or none.
            var output = (ConnectionOutput)server.Output;
            Task writing = Task.Run(async () =>
            {
                var random = new Random(4);
                for (int offset = 0; offset < data.Length;)
                {
                    await Eventually.WaitForAsync(() => output.Unsent == 0 && network.Loops[0].IsSleeping);
                    int size = Math.Min(data.Length - offset, random.Next(1, 16 * 1024));
                    FlushResult result = await server.Output.WriteAsync(data.AsMemory(offset, size)).AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                    Assert.False(result.IsCompleted || result.IsCanceled);
                    offset += size;
                }
                await server.Output.CompleteAsync();
            });

            // A slow reader for the first 128 KiB, then one that keeps up.
            var received = new MemoryStream();
            var buffer = new byte[64 * 1024];
            int n;
            while ((n = await client.ReceiveAsync(buffer.AsMemory(0, received.Length < 128 * 1024 ? 1024 : buffer.Length)).AsTask().WaitAsync(TimeSpan.FromSeconds(20))) > 0)
            {
                received.Write(buffer, 0, n);
                if (received.Length < 128 * 1024)
                {
                    await Task.Delay(1);
                }
            }
            await writing;
            EchoTests.AssertSameBytes(data, received.ToArray());

            if (callerSends)
            {
                Assert.True(network.Loops[0].Counters.CallerSends > 0, $"no flush sent by itself; wake-ups {network.Loops[0].Counters.Wakeups}");
                Assert.True(output.CallerSendsCutShort > 0, $"no caller send found the socket's buffer full ({network.Loops[0].Counters.CallerSends} caller sends)");
            }
            else
            {
                Assert.Equal(0, network.Loops[0].Counters.CallerSends);
            }
            Assert.Equal(data.Length, server.BytesSent);
        }
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Large_writes_from_the_callers_memory_are_sent_by_the_writing_thread_and_never_read_after_they_complete(bool callerSends)
    {
        // 64 KiB: at the default pause threshold, so each WriteAsync lends its memory instead of copying it (ConnectionOutput).
        const int WriteSize = 64 * 1024;
        const int Writes = 24;
        await using IoUringNetwork network = Network(callerSends);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            server.Socket.SendBufferSize = 8192; // until the slow reader below is done: then large enough for a whole write
            await UntilTheNextFlushCanSendItselfAsync(network, server);
            var output = (ConnectionOutput)server.Output;
            var expected = new MemoryStream();
            int completedAtOnce = 0;
            Task writing = Task.Run(async () =>
            {
                byte[] buffer = new byte[WriteSize]; // one buffer for every write: refilled as soon as a write completes
                for (int i = 0; i < Writes; i++)
                {
                    await Eventually.WaitForAsync(() => output.Unsent == 0 && network.Loops[0].IsSleeping && ThreadPool.PendingWorkItemCount == 0);
                    Pattern(WriteSize, seed: 100 + i).CopyTo(buffer, 0);
                    expected.Write(buffer);
                    long callerSentBefore = output.BytesSentByCallers;
                    ValueTask<FlushResult> write = server.Output.WriteAsync(buffer);
                    // Completed before returning, by its own send (the ring may also be done by now on a slow machine).
                    completedAtOnce += write.IsCompleted && output.BytesSentByCallers - callerSentBefore == WriteSize ? 1 : 0;
                    FlushResult result = await write.AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                    Assert.False(result.IsCompleted || result.IsCanceled);
                    Array.Fill(buffer, (byte)0xEE); // the caller's again: none of this may reach the peer
                }
                await server.Output.CompleteAsync();
            });

            // A slow reader for the first 256 KiB (the socket buffers fill: sends are cut short), then one that keeps up.
            // It blocks on a thread of its own: an awaiting reader's wake-ups are thread-pool work items, and a flush
            // sends itself only while nothing is queued there (with one, every write could go to the ring).
            var received = new MemoryStream();
            client.ReceiveTimeout = 20_000;
            Task reading = Task.Factory.StartNew(() =>
            {
                var chunk = new byte[64 * 1024];
                int n;
                while ((n = client.Receive(chunk, 0, received.Length < 256 * 1024 ? 2048 : chunk.Length, SocketFlags.None)) > 0)
                {
                    received.Write(chunk, 0, n);
                    if (received.Length < 256 * 1024)
                    {
                        Thread.Sleep(1);
                    }
                    else
                    {
                        server.Socket.SendBufferSize = 1 << 20;
                    }
                }
            }, TaskCreationOptions.LongRunning);
            await Task.WhenAll(writing, reading);
            EchoTests.AssertSameBytes(expected.ToArray(), received.ToArray());
            Assert.Equal(Writes * (long)WriteSize, server.BytesSent);
            Assert.Equal(0, output.BufferedBlocks);

            long callerSent = output.BytesSentByCallers;
            if (callerSends)
            {
                // Once the reader keeps up, the socket takes a whole write at once: it completes before WriteAsync returns.
                Assert.True(completedAtOnce > 0, $"no write completed at once; caller-sent {callerSent} B, cut short {output.CallerSendsCutShort}");
                Assert.True(output.CallerSendsCutShort > 0, $"no caller send found the socket's buffer full; caller-sent {callerSent} B");
            }
            else
            {
                Assert.Equal(0, callerSent);
            }
        }
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_lent_write_whose_memory_cannot_give_a_span_is_still_sent(bool callerSends)
    {
        // The flushing thread's send reads a lent write through Memory.Span, the ring's sender pins it: a caller's
        // MemoryManager that throws from the one must leave the bytes to the other, not throw with the sender stranded.
        await using IoUringNetwork network = Network(callerSends);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            await UntilTheNextFlushCanSendItselfAsync(network, server);
            byte[] data = Pattern(64 * 1024, seed: 7); // the default pause threshold: lent, not copied
            using var memory = new LentMemory(data, span: false);
            FlushResult result = await Task.Run(async () => await server.Output.WriteAsync(memory.Memory)).WaitAsync(TimeSpan.FromSeconds(10));
            Assert.False(result.IsCompleted || result.IsCanceled);
            Assert.Equal(data, await LoopbackPairs.ReceiveExactlyAsync(client, data.Length));
            Assert.Equal(0, ((ConnectionOutput)server.Output).BytesSentByCallers);
        }
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_lent_write_whose_memory_cannot_be_pinned_fails_the_connection_and_every_block_goes_back(bool callerSends)
    {
        // The ring's sender pins each piece of a gather in turn: the pool block pinned before the lent memory's Pin threw
        // must be unpinned, or it never goes back to the pool. (Over the caller-send limit: the ring sends, either way.)
        await using IoUringNetwork network = Network(callerSends);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            await UntilTheNextFlushCanSendItselfAsync(network, server);
            server.Output.Write(Pattern(100, seed: 9)); // written, not flushed: the write below sends it first, from a pool block
            using var memory = new LentMemory(Pattern(64 * 1024, seed: 10), pin: false); // the default pause threshold: lent
            InvalidOperationException error = await Assert.ThrowsAsync<InvalidOperationException>(
                () => Task.Run(async () => await server.Output.WriteAsync(memory.Memory)).WaitAsync(TimeSpan.FromSeconds(10)));
            Assert.Equal(LentMemory.Unpinnable, error.Message);
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            PinnedBlockMemoryPool pool = network.Loops[0].MemoryPoolIfCreated!;
            await Eventually.WaitForAsync(() => pool.RentedBlocks == 0);
            Assert.Equal(0, pool.RentedBlocks);
        }

        // The loop goes on: another connection sends.
        (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            await server.Output.WriteAsync(Pattern(100, seed: 11));
            Assert.Equal(Pattern(100, seed: 11), await LoopbackPairs.ReceiveExactlyAsync(client, 100));
        }
    }

    /// <summary>Native memory that may give no span, or refuse to be pinned.</summary>
    private sealed unsafe class LentMemory : MemoryManager<byte>
    {
        public const string Unpinnable = "This memory cannot be pinned.";
        private readonly byte* _pointer;
        private readonly int _length;
        private readonly bool _span;
        private readonly bool _pin;

        public LentMemory(byte[] data, bool span = true, bool pin = true)
        {
            _length = data.Length;
            _pointer = (byte*)NativeMemory.Alloc((nuint)_length);
            data.CopyTo(new Span<byte>(_pointer, _length));
            _span = span;
            _pin = pin;
        }

        public override Memory<byte> Memory => CreateMemory(_length);

        public override Span<byte> GetSpan() => _span ? new Span<byte>(_pointer, _length) : throw new InvalidOperationException("This memory gives no span.");

        public override MemoryHandle Pin(int elementIndex = 0) => _pin ? new(_pointer + elementIndex) : throw new InvalidOperationException(Unpinnable);

        public override void Unpin()
        {
        }

        protected override void Dispose(bool disposing) => NativeMemory.Free(_pointer);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Bytes_flushed_after_Abort_are_not_sent(bool callerSends)
    {
        await using IoUringNetwork network = Network(callerSends);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            await UntilTheNextFlushCanSendItselfAsync(network, server);
            // Abort posts the close to the loop; the flush comes right after, before the loop has run it. From a thread of
            // its own (not the pool's: nothing queued there that would make the flush post anyway).
            var thread = new Thread(() =>
            {
                server.Abort();
                server.Output.Write(Pattern(100, seed: 6));
                server.Output.FlushAsync().AsTask().GetAwaiter().GetResult();
            });
            thread.Start();
            thread.Join();
            var buffer = new byte[1000];
            int received;
            try
            {
                received = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
            }
            catch (SocketException ex) when (ex.SocketErrorCode == SocketError.ConnectionReset)
            {
                received = 0; // RST: nothing came before it
            }
            Assert.Equal(0, received); // "unsent data is dropped" (Abort): also what is flushed after it
            Assert.Equal(0, server.BytesSent);
        }
    }

    [NopInjectTheory] // the ring's SEND fails through IORING_NOP_INJECT_RESULT (6.10+)
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_send_that_meets_a_reset_fails_the_connection_whichever_thread_made_it(bool callerSends)
    {
        // Every send fails with ECONNRESET as the kernel reports it: the caller's send(2) and the ring's SEND alike.
        var faults = new FaultInjector([IORING_OP_SEND, IORING_OP_SENDMSG], [Errno.ECONNRESET], probability: 1.0, seed: 1);
        await using IoUringNetwork network = Network(callerSends, faults);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        await using (server)
        {
            await UntilTheNextFlushCanSendItselfAsync(network, server);
            await Task.Run(async () =>
            {
                server.Output.Write(Pattern(100, seed: 5));
                await server.Output.FlushAsync();
            });

            // The reset is the connection's: its input fails with it (as a reset, not an end of stream), it closes, and
            // later flushes see the output completed (a peer's reset is not the application's error).
            IOException error = await Assert.ThrowsAnyAsync<IOException>(async () =>
            {
                while (!(await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10))).IsCompleted)
                {
                }
            });
            Assert.Equal(SocketError.ConnectionReset, Assert.IsType<SocketException>(error.InnerException).SocketErrorCode);
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            server.Output.Write(new byte[10]);
            Assert.True((await server.Output.FlushAsync()).IsCompleted);
            Assert.True((callerSends ? 1 : 0) == faults.CallerSendFaults, $"caller-send faults {faults.CallerSendFaults}, all {faults.Injected}, caller sends {network.Loops[0].Counters.CallerSends}");
            Assert.Equal(0, server.BytesSent);
        }
    }
}
