using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Net;
using IoUring.Tests.Support;
using Xunit.Abstractions;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Reliability;

/// <summary>
/// Injected failures (through the real kernel: chosen SQEs complete with an errno) while many connections echo
/// hashed data: each connection ends with exactly its bytes or with an exception, nothing hangs, nothing leaks.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class FaultInjectionTests(ITestOutputHelper output)
{
    private const int Connections = 64;

    private static async Task<(int Completed, int Failed)> EchoUnderFaultsAsync(IoUringNetwork network, IoUringListener listener, int seed)
    {
        int completed = 0, failed = 0;
        await Task.WhenAll(Enumerable.Range(0, Connections).Select(async i =>
        {
            var random = new Random(seed + i);
            byte[] payload = RandomNumberGenerator.GetBytes(random.Next(0, 512 * 1024));
            try
            {
                using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                await client.ConnectAsync(listener.LocalEndPoint);
                byte[] echoed = await EchoTests.RoundTripAsync(new NetworkStream(client), () => client.Shutdown(SocketShutdown.Send), payload, seed + i)
                    .WaitAsync(TimeSpan.FromSeconds(60));
                EchoTests.AssertSameBytes(payload, echoed); // a connection that completes must be byte-exact
                Interlocked.Increment(ref completed);
            }
            catch (Exception ex) when (ex is IOException or SocketException)
            {
                Interlocked.Increment(ref failed); // a clear failure: reset, not a truncated "success"
            }
        }));
        return (completed, failed);
    }

    [NopInjectTheory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Transient_errors_on_receive_and_send_are_retried_and_lose_no_byte(bool receiveCap)
    {
        var faults = new FaultInjector([IORING_OP_RECV, IORING_OP_RECVMSG, IORING_OP_SEND, IORING_OP_SENDMSG], [Errno.ENOBUFS, Errno.EAGAIN, Errno.EINTR], probability: 0.3, seed: 7);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, Loop = { Hooks = new() { Faults = faults, Capabilities = KernelFeatures.WithReceiveCap(receiveCap) } } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        var (completed, failed) = await EchoUnderFaultsAsync(network, listener, seed: 100);
        output.WriteLine($"transient faults: {Connections} connections, {faults.Injected} faults injected ({faults.CallerSendFaults} on flushing threads' own sends), {completed} byte-exact, {failed} failed");
        Assert.True(faults.Injected > 20, $"only {faults.Injected} faults were injected");
        // Every one of these errors is retried: no connection may fail, and every byte arrives.
        Assert.Equal(Connections, completed);
    }

    [NopInjectTheory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task Resets_fail_connections_cleanly_and_leave_no_fd_handle_or_block_behind(bool receiveCap)
    {
        var faults = new FaultInjector([IORING_OP_RECV, IORING_OP_RECVMSG, IORING_OP_SEND, IORING_OP_SENDMSG], [Errno.ECONNRESET, Errno.ECANCELED, Errno.ENOBUFS, Errno.EAGAIN, Errno.EINTR], probability: 0.02, seed: 11);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, Loop = { Hooks = new() { Faults = faults, Capabilities = KernelFeatures.WithReceiveCap(receiveCap) }, BufferCount = 32, BufferSize = 2048 } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        await EchoUnderFaultsAsync(network, listener, seed: 0); // warm up pools and runtime fds
        await Eventually.WaitForAsync(() => network.ConnectionCount == 0);
        int fds = FdCount.Owned();
        int owners = network.Loops.Sum(l => l.LiveOwners);
        int blocks = network.RentedMemoryBlocks;
        long receiveBlocks = network.Loops.Sum(l => l.ReceiveBuffers.Spares.HeldBlocks); // Inputs' and vectored receives'

        int totalCompleted = 0, totalFailed = 0;
        for (int round = 1; round <= 3; round++)
        {
            var (completed, failed) = await EchoUnderFaultsAsync(network, listener, seed: round * 1000);
            totalCompleted += completed;
            totalFailed += failed;
        }
        output.WriteLine($"reset faults: {3 * Connections} connections, {faults.Injected} faults injected ({faults.CallerSendFaults} on flushing threads' own sends), {totalCompleted} byte-exact, {totalFailed} failed cleanly");
        Assert.True(totalFailed > 0, "no connection failed: the resets were not injected where it matters");
        Assert.True(totalCompleted > 0, "no connection completed");

        await Eventually.WaitForAsync(() => network.ConnectionCount == 0 && FdCount.Owned() <= fds && network.Loops.Sum(l => l.LiveOwners) == owners
            && network.Loops.Sum(l => l.ReceiveBuffers.Spares.HeldBlocks) == receiveBlocks);
        Assert.Equal(0, network.ConnectionCount);
        Assert.Equal(fds, FdCount.Owned());
        Assert.Equal(owners, network.Loops.Sum(l => l.LiveOwners));
        Assert.Equal(blocks, network.RentedMemoryBlocks);
        Assert.Equal(receiveBlocks, network.Loops.Sum(l => l.ReceiveBuffers.Spares.HeldBlocks));
    }

    [NopInjectFact]
    public async Task Transient_errors_on_the_flushing_threads_own_sends_are_retried_through_the_ring()
    {
        // Request/response rounds: between them the loop sleeps, so the echo's flushes send themselves (send(2)), and
        // those are what fail here: each failure goes to the connection's sender, which sends the same bytes again.
        // One client: with more, their rounds overlap (under qemu's emulation 8 clients left 22 caller sends of 800
        // replies; 2 clients here 63-180 of 400), so flushes find work queued and post instead.
        const int Clients = 1, Rounds = 300;
        var faults = new FaultInjector([IORING_OP_SEND, IORING_OP_SENDMSG], [Errno.ENOBUFS, Errno.EAGAIN, Errno.EINTR], probability: 0.3, seed: 5);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { Hooks = new() { Faults = faults } } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        await Task.WhenAll(Enumerable.Range(0, Clients).Select(async i =>
        {
            using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
            await client.ConnectAsync(listener.LocalEndPoint);
            var random = new Random(i);
            for (int round = 0; round < Rounds; round++)
            {
                byte[] message = RandomNumberGenerator.GetBytes(random.Next(1, 2048));
                await client.SendAsync(message);
                byte[] reply = new byte[message.Length];
                for (int received = 0; received < reply.Length;)
                {
                    int n = await client.ReceiveAsync(reply.AsMemory(received)).AsTask().WaitAsync(TimeSpan.FromSeconds(20));
                    Assert.NotEqual(0, n);
                    received += n;
                }
                Assert.Equal(message, reply);
            }
        }));
        output.WriteLine($"{Clients} x {Rounds} rounds: {faults.Injected} faults injected, {faults.CallerSendFaults} on flushing threads' own sends, {network.Loops[0].Counters.CallerSends} caller sends");
        Assert.True(faults.CallerSendFaults > 10, $"only {faults.CallerSendFaults} faults hit the flushing threads' own sends");
    }

    [NopInjectFact]
    public async Task Accept_failing_for_lack_of_fds_backs_off_and_recovers()
    {
        var faults = new FaultInjector([IORING_OP_ACCEPT], [Errno.EMFILE], probability: 1.0, seed: 1);
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { Hooks = new() { Faults = faults } } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        await Task.Delay(500);
        // Every accept fails: with a 50 ms backoff that is about 10 attempts in 500 ms, not a busy spin.
        output.WriteLine($"EMFILE: {faults.Injected} accept attempts and {network.Loops[0].Counters.Syscalls} io_uring_enter calls in 500 ms");
        Assert.InRange(faults.Injected, 2, 40);
        long syscalls = network.Loops[0].Counters.Syscalls;
        Assert.True(syscalls < 200, $"{syscalls} io_uring_enter calls in 500 ms: the loop is spinning");
        Assert.True(listener.FdExhaustions >= 2);
    }

    /// <summary>Runs <paramref name="action"/> on <paramref name="loop"/>'s thread and returns what it returned.</summary>
    private static Task<T> OnLoopAsync<T>(EventLoop loop, Func<T> action)
    {
        var done = new TaskCompletionSource<T>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(_ => done.SetResult(action()), null);
        return done.Task;
    }

    /// <summary>A fault injector that fails nothing by itself: its <see cref="FaultInjector.RefuseSqes"/> refuses requests.</summary>
    private static FaultInjector SqeRefuser() => new([IORING_OP_NOP], [Errno.ECONNRESET], probability: 0, seed: 1);

    /// <summary>A one-loop network with <paramref name="faults"/>; each refused request is reported to <paramref name="report"/> (by default ignored).</summary>
    private static IoUringNetwork RefusingNetwork(FaultInjector faults, Action<Exception>? report = null, Action<IoUringNetworkOptions>? configure = null)
    {
        var options = new IoUringNetworkOptions { LoopCount = 1, Loop = { Hooks = new() { Faults = faults }, UnhandledException = report ?? (_ => { }) } };
        configure?.Invoke(options);
        return new IoUringNetwork(options);
    }

    [Fact]
    public async Task A_connect_whose_completion_the_loop_refuses_sqes_for_still_completes_and_leaves_no_owner_behind()
    {
        // The loop refuses the two requests asked for once the CONNECT is queued (as when the SQ stays full after an early
        // submit): the new connection's RECV and its hang-up poll. ConnectAsync used to wait for ever, its owner never freed.
        var faults = SqeRefuser();
        int reported = 0;
        await using var network = RefusingNetwork(faults, _ => Interlocked.Increment(ref reported));
        using var peer = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        peer.Listen();
        EventLoop loop = network.Loops[0];
        int owners = loop.LiveOwners;

        // ConnectAsync posts the CONNECT's start; the refusal posted right behind it runs in the same iteration, before
        // the CONNECT's completion can.
        Task<IoUringConnection> connecting = await OnLoopAsync(loop, () =>
        {
            Task<IoUringConnection> connect = network.ConnectAsync(peer.LocalEndPoint!).AsTask();
            loop.Schedule(_ => faults.RefuseSqes(2), null);
            return connect;
        });
        IoUringConnection connection = await connecting.WaitAsync(TimeSpan.FromSeconds(5)); // hang guard
        Assert.Equal(2, faults.SqesRefused);
        Assert.Equal(2, reported);

        // Both directions work: the refused requests were made again.
        using Socket accepted = await peer.AcceptAsync();
        await connection.Output.WriteAsync(new byte[] { 1, 2, 3 });
        Assert.Equal(new byte[] { 1, 2, 3 }, await LoopbackPairs.ReceiveExactlyAsync(accepted, 3));
        accepted.Send([4, 5]);
        ReadResult read = await connection.Input.ReadAtLeastAsync(2).AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        Assert.Equal(new byte[] { 4, 5 }, read.Buffer.ToArray());
        connection.Input.AdvanceTo(read.Buffer.End);

        await connection.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        await Eventually.WaitForAsync(() => network.ConnectionCount == 0 && loop.LiveOwners == owners);
        Assert.Equal(0, network.ConnectionCount);
        Assert.Equal(owners, loop.LiveOwners);
    }

    [Fact]
    public async Task A_connect_the_loop_has_no_sqe_for_is_tried_again_and_connects()
    {
        // The SQ still full after an early submit when the CONNECT asks for its SQE: every other request of the loop's
        // is tried again next iteration, and so must this one (it used to fail: "submission queue stays full").
        var faults = SqeRefuser();
        await using var network = RefusingNetwork(faults);
        using var peer = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        peer.Listen();
        EventLoop loop = network.Loops[0];
        int owners = loop.LiveOwners;

        Task<IoUringConnection> connecting = await OnLoopAsync(loop, () =>
        {
            faults.RefuseSqes(1); // the next SQE asked for: the CONNECT's, posted by ConnectAsync
            return network.ConnectAsync(peer.LocalEndPoint!).AsTask();
        });
        IoUringConnection connection = await connecting.WaitAsync(TimeSpan.FromSeconds(5)); // hang guard
        Assert.Equal(1, faults.SqesRefused);

        using Socket accepted = await peer.AcceptAsync();
        await connection.Output.WriteAsync(new byte[] { 7, 8 });
        Assert.Equal(new byte[] { 7, 8 }, await LoopbackPairs.ReceiveExactlyAsync(accepted, 2));
        await connection.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        await Eventually.WaitForAsync(() => network.ConnectionCount == 0 && loop.LiveOwners == owners);
        Assert.Equal(owners, loop.LiveOwners);
    }

    [Fact]
    public async Task A_connect_cancel_the_loop_refuses_an_sqe_for_is_tried_again_and_the_connect_ends_cancelled()
    {
        // A listener whose accept queue is full drops SYNs, so the CONNECT stays in flight until it is cancelled.
        var faults = SqeRefuser();
        int reported = 0;
        await using var network = RefusingNetwork(faults, _ => Interlocked.Increment(ref reported));
        using var peer = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        peer.Listen(0);
        var fillers = new List<Socket>();
        try
        {
            for (int i = 0; i < 3; i++)
            {
                var filler = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                fillers.Add(filler);
                _ = filler.ConnectAsync(peer.LocalEndPoint!); // the later ones stay in SYN_SENT: the queue is full
            }
            await Task.Delay(200);
            EventLoop loop = network.Loops[0];
            int owners = loop.LiveOwners;
            using var cts = new CancellationTokenSource();
            // ConnectAsync posts the CONNECT's start; posted right behind it, the refusal and the cancel come once its
            // SQE is written, so the one SQE refused is the cancel's.
            Task<IoUringConnection> connecting = await OnLoopAsync(loop, () =>
            {
                Task<IoUringConnection> connect = network.ConnectAsync(peer.LocalEndPoint!, cts.Token).AsTask();
                loop.Schedule(_ =>
                {
                    faults.RefuseSqes(1);
                    cts.Cancel();
                }, null);
                return connect;
            });
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => connecting.WaitAsync(TimeSpan.FromSeconds(5)));
            Assert.Equal(1, faults.SqesRefused);
            Assert.Equal(1, reported); // the refusal is reported, not thrown into the loop
            await Eventually.WaitForAsync(() => loop.LiveOwners == owners);
            Assert.Equal(owners, loop.LiveOwners);
        }
        finally
        {
            fillers.ForEach(f => f.Dispose());
        }
    }

    /// <summary>
    /// Refuses the one request a backing-off owner asks for right after its next error (<paramref name="errors"/>
    /// counts them): once an error was handled (its back-off TIMEOUT queued) and a later CQE (that TIMEOUT's) re-armed the
    /// failing request, whose error comes next and asks for the back-off. Loop thread; runs each iteration until then.
    /// </summary>
    private static Task RefuseTheNextBackOffAsync(EventLoop loop, FaultInjector faults, Func<long> errors)
    {
        var refused = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        long seen = -1, cqes = -1;
        void Step(object? _)
        {
            if (seen < 0)
            {
                seen = errors();
            }
            else if (cqes < 0 && errors() != seen)
            {
                cqes = loop.Counters.Cqes;
            }
            else if (cqes >= 0 && loop.Counters.Cqes > cqes)
            {
                faults.RefuseSqes(1);
                refused.SetResult();
                return;
            }
            loop.Schedule(Step, null);
        }
        loop.Schedule(Step, null);
        return refused.Task;
    }

    private static async Task<IoUringConnection> AcceptWithinAsync(IoUringListener listener, Task<IoUringConnection?>? accepting = null)
        => (await (accepting ?? listener.AcceptAsync().AsTask()).WaitAsync(TimeSpan.FromSeconds(5)))!; // hang guard

    [Fact]
    public async Task An_accept_that_fills_the_backlog_while_the_loop_refuses_its_cancel_still_hands_out_the_connection_and_leaks_no_fd()
    {
        // Backlog 1: the first connection fills the listener's queue, so the acceptor pauses and cancels its ACCEPT, and the
        // loop refuses that cancel (as when the SQ stays full after an early submit). The accepted fd used to be dropped.
        var faults = SqeRefuser();
        await using var network = RefusingNetwork(faults, configure: o => o.Backlog = 1);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        int fds = FdCount.Owned();
        faults.RefuseSqes(1);
        for (int i = 0; i < 2; i++)
        {
            using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            await client.ConnectAsync(listener.LocalEndPoint);
            IoUringConnection server = await AcceptWithinAsync(listener);
            client.Dispose();
            await server.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        }
        Assert.Equal(1, faults.SqesRefused);
        await Eventually.WaitForAsync(() => network.ConnectionCount == 0 && FdCount.Owned() <= fds);
        Assert.Equal(fds, FdCount.Owned());
    }

    [Fact]
    public async Task A_single_shot_accept_whose_rearm_the_loop_refuses_is_armed_again_and_the_next_client_is_accepted()
    {
        // The loop refuses the first three requests after an ACCEPT completes: the connection's hang-up poll, its RECV
        // (the application is waiting, so it starts receiving at once) and the next ACCEPT, which used to be lost.
        var faults = SqeRefuser();
        await using var network = RefusingNetwork(faults, configure: o => o.MultishotAccept = false);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        faults.RefuseSqes(3);
        for (int i = 0; i < 2; i++)
        {
            Task<IoUringConnection?> accepting = listener.AcceptAsync().AsTask();
            using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            await client.ConnectAsync(listener.LocalEndPoint);
            await using IoUringConnection server = await AcceptWithinAsync(listener, accepting);
        }
        Assert.Equal(3, faults.SqesRefused);
    }

    [Fact]
    public async Task An_accept_resumed_after_a_full_backlog_whose_rearm_the_loop_refuses_is_armed_again()
    {
        var faults = SqeRefuser();
        await using var network = RefusingNetwork(faults, configure: o => o.Backlog = 1);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        EventLoop loop = network.Loops[0];
        using var first = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await first.ConnectAsync(listener.LocalEndPoint);
        await Eventually.WaitForAsync(() => network.ConnectionCount == 1);
        await Task.Delay(100); // the queue is full: the acceptor paused, its ACCEPT cancelled
        // Taken on the loop thread: its RECV is refused (and retried next iteration, refused again), then the ACCEPT the
        // resume posts, which used to be lost.
        await using IoUringConnection server = await OnLoopAsync(loop, () =>
        {
            faults.RefuseSqes(3);
            return listener.AcceptAsync().AsTask();
        }).Unwrap().WaitAsync(TimeSpan.FromSeconds(5)) ?? throw new InvalidOperationException("no connection");
        using var second = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await second.ConnectAsync(listener.LocalEndPoint);
        await using IoUringConnection next = await AcceptWithinAsync(listener);
        Assert.Equal(3, faults.SqesRefused);
    }

    [NopInjectFact]
    public async Task Accept_backing_off_for_lack_of_fds_whose_back_off_the_loop_refuses_keeps_retrying()
    {
        var faults = new FaultInjector([IORING_OP_ACCEPT], [Errno.EMFILE], probability: 1.0, seed: 1);
        await using var network = RefusingNetwork(faults);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        await RefuseTheNextBackOffAsync(network.Loops[0], faults, () => listener.FdExhaustions).WaitAsync(TimeSpan.FromSeconds(5));
        await Eventually.WaitForAsync(() => faults.SqesRefused == 1);
        int attempts = faults.Injected;
        // The back-off's TIMEOUT was refused: the ACCEPT must still be tried again (it used to stop for good).
        await Eventually.WaitForAsync(() => faults.Injected >= attempts + 3);
        Assert.Equal(1, faults.SqesRefused);
        Assert.True(faults.Injected >= attempts + 3, $"{faults.Injected - attempts} accept attempts after the refused back-off");
    }

    [NopInjectFact]
    public async Task A_receive_backing_off_from_an_empty_buffer_ring_whose_back_off_the_loop_refuses_keeps_the_connection_and_retries()
    {
        // Every RECV finds the buffer ring empty (ENOBUFS): the receive backs off (a TIMEOUT) and tries again. The loop
        // refuses one back-off's TIMEOUT; the connection used to be aborted for it.
        var faults = new FaultInjector([IORING_OP_RECV], [Errno.ENOBUFS], probability: 1.0, seed: 1);
        await using var network = RefusingNetwork(faults);
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        {
            EventLoop loop = network.Loops[0];
            await RefuseTheNextBackOffAsync(loop, faults, () => loop.ReceiveBuffers.Exhaustions).WaitAsync(TimeSpan.FromSeconds(5));
            await Eventually.WaitForAsync(() => faults.SqesRefused == 1);
            long exhaustions = loop.ReceiveBuffers.Exhaustions;

            // Still open: what the server sends arrives, and its receive goes on being tried.
            await server.Output.WriteAsync(new byte[] { 1, 2, 3 });
            Assert.Equal(new byte[] { 1, 2, 3 }, await LoopbackPairs.ReceiveExactlyAsync(client, 3));
            await Eventually.WaitForAsync(() => loop.ReceiveBuffers.Exhaustions >= exhaustions + 3);
            Assert.Equal(1, faults.SqesRefused);
            Assert.True(loop.ReceiveBuffers.Exhaustions >= exhaustions + 3, $"{loop.ReceiveBuffers.Exhaustions - exhaustions} receives tried after the refused back-off");
            server.Abort();
        }
    }

    [NopInjectFact]
    public async Task An_injected_failure_in_a_linked_chain_cancels_the_rest_as_a_real_failure_does()
    {
        // A real failure of a linked request cancels the rest of its chain (the kernel completes them with ECANCELED);
        // an injected one must too, or a test of a chain's failure sees the next link run as if nothing had failed.
        var faults = new FaultInjector([IORING_OP_NOP], [Errno.EIO], probability: 0, seed: 1);
        using var loop = new EventLoop(new EventLoopOptions { Hooks = new() { Faults = faults } });
        using var handler = new RecordingHandler(loop);
        await handler.OnLoopAsync(h =>
        {
            faults.FailSqe(IORING_OP_NOP, after: 0, Errno.EIO);
            h.Submit(new io_uring_sqe { opcode = IORING_OP_NOP, flags = IOSQE_IO_LINK }, 1);
            h.Submit(RecordingHandler.Nop(), 2);
        });
        await handler.WaitForAsync(2);
        Assert.Equal(1, faults.Injected);
        Assert.Equal(-Errno.EIO, handler.Completions.Single(c => c.Value == 1).Result);
        Assert.Equal(-Errno.ECANCELED, handler.Completions.Single(c => c.Value == 2).Result);
    }
}
