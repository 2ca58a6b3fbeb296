using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
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
    /// <summary>
    /// What a paused connection may hold, with or without the kernel's multishot receive cap: its pause threshold plus one
    /// ring buffer (each RECV is armed for what Input can still take: a capped multishot RECV where the kernel has the cap,
    /// a single-shot RECV of that length where it does not; docs/reliability.md).
    /// </summary>
    private static long HeldBound(int maxRead, int bufferSize) => maxRead + bufferSize;

    /// <summary>Sends 64 KiB chunks without blocking for a second (waiting whenever TCP pushes back); returns the bytes sent. Leaves the socket non-blocking.</summary>
    private static async Task<long> SendForASecondAsync(Socket client)
    {
        client.Blocking = false;
        byte[] chunk = new byte[64 * 1024];
        long sent = 0;
        var deadline = DateTime.UtcNow.AddSeconds(1);
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
        return sent;
    }

    [Theory]
    [InlineData(16, true)]
    [InlineData(512, true)]
    [InlineData(16, false)]  // as on kernels without the receive cap
    [InlineData(512, false)]
    public async Task A_fast_sender_to_a_reader_that_does_not_read_stays_under_the_memory_bound(int ringBuffers, bool receiveLimit)
    {
        const int MaxRead = 64 * 1024, BufferSize = 8192;
        IoUringCapabilities caps = KernelFeatures.WithReceiveCap(receiveLimit);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = MaxRead,
            Loop = { BufferCount = ringBuffers, BufferSize = BufferSize, Hooks = new() { Capabilities = caps } },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint!);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;

        // Send until the kernel pushes back: the server must have stopped receiving.
        long sent = await SendForASecondAsync(client);
        long buffered = server.BytesReceived; // all of it sits in Input: the application consumed nothing
        long memory = server.Receiver.Input.HeldBytes;
        output.WriteLine($"ring {ringBuffers} x {BufferSize}, receive cap {caps.HasReceiveLimit}: buffered {buffered} B, Input's blocks {memory} B, sent {sent} B");
        Assert.InRange(buffered, MaxRead, HeldBound(MaxRead, BufferSize));
        // Input keeps the ring buffers of bulk receives, each at least half full: its blocks hold little more than that.
        Assert.InRange(memory, buffered, 2 * buffered + BufferSize);
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
    public async Task A_receive_the_loop_refuses_an_sqe_for_is_armed_again_and_loses_nothing()
    {
        // Without the kernel's receive cap each RECV is single-shot and re-armed after every receive. The loop refuses the
        // first SQEs asked for once data flows (those re-arms, as when the SQ stays full after an early submit): the
        // receive must be armed again next iteration, not end the connection (before, the refusal reset it), and the
        // bound must hold.
        const int MaxRead = 64 * 1024, BufferSize = 8192, RingBuffers = 512, Refusals = 3;
        IoUringCapabilities caps = KernelFeatures.WithReceiveCap(false);
        var faults = new FaultInjector([IoUring.Interop.IoUringConstants.IORING_OP_NOP], [IoUring.Interop.Errno.ECONNRESET], probability: 0, seed: 1);
        var unhandled = new List<Exception>();
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = MaxRead,
            Loop =
            {
                BufferCount = RingBuffers, BufferSize = BufferSize, Hooks = new() { Capabilities = caps, Faults = faults },
                UnhandledException = e => { lock (unhandled) { unhandled.Add(e); } },
            },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        {
            await Task.Delay(50); // receiving has started
            faults.RefuseSqes(Refusals);
            long sent = await SendForASecondAsync(client);
            faults.RefuseSqes(0);
            long buffered = server.BytesReceived;
            output.WriteLine($"refused {faults.SqesRefused}; buffered {buffered} B of {sent} B sent");
            Assert.Equal(Refusals, faults.SqesRefused);
            Assert.Equal(Refusals, unhandled.Count); // each refusal reported, none fatal
            Assert.InRange(buffered, MaxRead, HeldBound(MaxRead, BufferSize));

            // The reader catches up: every byte arrives.
            client.Blocking = true;
            client.Shutdown(SocketShutdown.Send);
            long total = 0;
            while (true)
            {
                ReadResult result = await server.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
                total += result.Buffer.Length;
                server.Input.AdvanceTo(result.Buffer.End);
                if (result.IsCompleted)
                {
                    break;
                }
            }
            Assert.Equal(sent, total);
            server.Abort();
        }
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

    [Theory]
    [InlineData(true)]
    [InlineData(false)] // as on kernels without the receive cap
    public async Task A_slow_reader_is_never_further_behind_than_the_bound(bool receiveLimit)
    {
        // The reader takes 16 KiB at a time with pauses between: Input pauses and resumes many times, and at every
        // read what it holds (received and not yet consumed) stays within the bound, not only at the first pause.
        const int MaxRead = 64 * 1024, BufferSize = 8192, RingBuffers = 64, Step = 16 * 1024;
        IoUringCapabilities caps = KernelFeatures.WithReceiveCap(receiveLimit);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = MaxRead,
            Loop = { BufferCount = RingBuffers, BufferSize = BufferSize, Hooks = new() { Capabilities = caps } },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint!);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;

        const int Total = 8 * 1024 * 1024;
        byte[] payload = new byte[Total];
        new Random(7).NextBytes(payload);
        Task sending = Task.Run(() =>
        {
            client.Send(payload);
            client.Shutdown(SocketShutdown.Send);
        });

        long consumed = 0, mostHeld = 0;
        int reads = 0;
        var received = new MemoryStream();
        while (true)
        {
            ReadResult result = await server.Input.ReadAsync();
            mostHeld = Math.Max(mostHeld, server.BytesReceived - consumed);
            ReadOnlySequence<byte> take = result.Buffer.Slice(0, Math.Min(Step, result.Buffer.Length));
            foreach (ReadOnlyMemory<byte> segment in take)
            {
                received.Write(segment.Span);
            }
            consumed += take.Length;
            server.Input.AdvanceTo(take.End);
            if (result.IsCompleted && take.Length == result.Buffer.Length)
            {
                break;
            }
            if (++reads % 8 == 0)
            {
                await Task.Delay(2);
            }
        }
        await sending;
        long bound = HeldBound(MaxRead, BufferSize);
        output.WriteLine($"receive cap {caps.HasReceiveLimit}: {reads} reads, most held {mostHeld} B (bound {bound} B)");
        EchoTests.AssertSameBytes(payload, received.ToArray());
        Assert.InRange(mostHeld, 1, bound);
        await server.DisposeAsync();
    }
}
