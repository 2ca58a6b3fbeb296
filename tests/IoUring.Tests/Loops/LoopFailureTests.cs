using System.Buffers;
using System.Collections.Concurrent;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Text;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Loops;

/// <summary>What an owner does on the completion path (throwing from any hook) never stops the loop.</summary>
public sealed class LoopFailureTests
{
    /// <summary>A handler whose hooks throw on demand.</summary>
    private sealed class ThrowingHandler(EventLoop loop) : RingHandler(loop)
    {
        public bool ThrowOnCompletion { get; init; }
        public bool ThrowOnException { get; init; }
        public bool ThrowOnReleased { get; init; }

        protected internal override void OnCompletion(ulong userValue, int result, uint flags)
        {
            if (ThrowOnCompletion)
            {
                throw new InvalidOperationException("from OnCompletion");
            }
        }

        protected override void OnException(Exception exception)
        {
            if (ThrowOnException)
            {
                throw new InvalidOperationException("from OnException", exception);
            }
            base.OnException(exception);
        }

        protected override void OnReleased()
        {
            if (ThrowOnReleased)
            {
                throw new InvalidOperationException("from OnReleased");
            }
        }
    }

    private static (EventLoop Loop, ConcurrentQueue<Exception> Reported) NewLoop()
    {
        var reported = new ConcurrentQueue<Exception>();
        var loop = new EventLoop(new EventLoopOptions { UnhandledException = reported.Enqueue });
        return (loop, reported);
    }

    /// <summary>The loop still runs: a NOP submitted now completes.</summary>
    private static async Task AssertLoopRunsAsync(EventLoop loop)
    {
        Assert.False(loop.Stopped.IsCompleted, "the loop stopped");
        using var probe = new RecordingHandler(loop);
        await probe.OnLoopAsync(h => h.Submit(RecordingHandler.Nop(), 7)).WaitAsync(TimeSpan.FromSeconds(10));
        await probe.WaitForAsync(1, timeoutMs: 5000);
        Assert.Equal(7UL, probe.Completions.Single().Value);
    }

    [Fact]
    public async Task Exceptions_reported_from_several_threads_at_once_are_all_counted()
    {
        // Off the loop thread too: a connection's ConnectionClosed callback that throws is reported from the thread pool,
        // possibly while the loop reports its own.
        using var loop = new EventLoop(new EventLoopOptions { UnhandledException = _ => { } });
        const int Threads = 4, Each = 50_000;
        var exception = new InvalidOperationException("reported");
        var start = new ManualResetEventSlim();
        Task[] reporters = Enumerable.Range(0, Threads).Select(_ => Task.Factory.StartNew(() =>
        {
            start.Wait();
            for (int i = 0; i < Each; i++)
            {
                loop.ReportUnhandled(exception);
            }
        }, TaskCreationOptions.LongRunning)).ToArray();
        start.Set();
        await Task.WhenAll(reporters).WaitAsync(TimeSpan.FromSeconds(30));
        Assert.Equal(Threads * Each, loop.Counters.HandlerExceptions);
    }

    [Fact]
    public async Task An_exception_in_a_completion_handler_does_not_stop_the_loop()
    {
        var reported = new List<Exception>();
        using var loop = new EventLoop(new EventLoopOptions { UnhandledException = ex => { lock (reported) { reported.Add(ex); } } });
        using var handler = new RecordingHandler(loop) { Throw = (value, _, _) => value == 1 };
        await handler.OnLoopAsync(h => h.Submit(RecordingHandler.Nop(), 1));
        await handler.WaitForAsync(1);
        await handler.OnLoopAsync(h => h.Submit(RecordingHandler.Nop(), 2));
        await handler.WaitForAsync(1);
        Assert.Single(reported);
        Assert.Equal(0, handler.InFlight);
    }

    [Fact]
    public async Task A_handler_whose_OnReleased_throws_does_not_stop_the_loop()
    {
        var (loop, reported) = NewLoop();
        using (loop)
        {
            var handler = new ThrowingHandler(loop) { ThrowOnReleased = true };
            // Disposed with its NOP in flight: OnReleased runs from the NOP's final completion.
            await RunOnLoopAsync(loop, () =>
            {
                handler.Submit(RecordingHandler.Nop(), 1);
                handler.Dispose();
            });
            await Eventually.WaitForAsync(() => !reported.IsEmpty || loop.Stopped.IsCompleted);
            await AssertLoopRunsAsync(loop);
            Assert.Contains(reported, e => e.Message == "from OnReleased");
            Assert.Equal(0, handler.InFlight);
            Assert.Equal(0, loop.CustomSlotsInUse);
        }
    }

    [Fact]
    public async Task A_handler_whose_OnException_throws_does_not_stop_the_loop()
    {
        var (loop, reported) = NewLoop();
        using (loop)
        {
            using var handler = new ThrowingHandler(loop) { ThrowOnCompletion = true, ThrowOnException = true };
            await RunOnLoopAsync(loop, () => handler.Submit(RecordingHandler.Nop(), 1));
            await Eventually.WaitForAsync(() => !reported.IsEmpty || loop.Stopped.IsCompleted);
            await AssertLoopRunsAsync(loop);
            Exception thrown = Assert.Single(reported);
            Assert.Equal("from OnException", thrown.Message);
            Assert.Equal("from OnCompletion", thrown.InnerException?.Message);
            Assert.Equal(0, handler.InFlight);
        }
    }

    [Fact]
    public async Task A_connection_keeps_working_and_closes_after_a_handler_on_its_loop_threw_from_OnReleased()
    {
        var reported = new ConcurrentQueue<Exception>();
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { UnhandledException = reported.Enqueue } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;

        var handler = new ThrowingHandler(server.Loop) { ThrowOnReleased = true };
        await RunOnLoopAsync(server.Loop, () =>
        {
            handler.Submit(RecordingHandler.Nop(), 1);
            handler.Dispose();
        });
        await Eventually.WaitForAsync(() => !reported.IsEmpty);
        Assert.Contains(reported, e => e.Message == "from OnReleased");

        await client.SendAsync("ping"u8.ToArray());
        ReadResult read = await server.Input.ReadAtLeastAsync(4).AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        Assert.Equal("ping", Encoding.ASCII.GetString(read.Buffer.Slice(0, 4).ToArray()));
        server.Input.AdvanceTo(read.Buffer.GetPosition(4));
        await server.Output.WriteAsync("pong"u8.ToArray());
        byte[] buffer = new byte[4];
        Assert.Equal(4, await client.ReceiveAsync(buffer).WaitAsync(TimeSpan.FromSeconds(5)));
        Assert.Equal("pong", Encoding.ASCII.GetString(buffer));

        client.Shutdown(SocketShutdown.Send);
        await server.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        Assert.True(server.Closed.IsCompletedSuccessfully);
    }

    internal static Task RunOnLoopAsync(EventLoop loop, Action action)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(_ =>
        {
            try
            {
                action();
                done.SetResult();
            }
            catch (Exception ex)
            {
                done.SetException(ex);
            }
        }, null);
        return done.Task.WaitAsync(TimeSpan.FromSeconds(10));
    }
}

/// <summary>A loop whose io_uring_enter fails (EBADR: the kernel dropped completions) stops its connections on the way out.</summary>
public sealed class BrokenRingTests
{
    [Fact]
    public async Task A_loop_leaving_on_a_failed_enter_still_closes_its_connections_and_stops()
    {
        var reported = new ConcurrentQueue<Exception>();
        var faults = new IoUring.Testing.FaultInjector([], [Errno.EBADR], probability: 0, seed: 1);
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { Hooks = new() { Faults = faults }, UnhandledException = reported.Enqueue } });
        var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        EventLoop loop = server.Loop;

        faults.FailNextEnter(Errno.EBADR);
        loop.Schedule(_ => { }, null); // wake it: its next enter fails

        await loop.Stopped.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Contains(reported, e => e is IoUringException { Errno: Errno.EBADR });
        // The connection was closed on the way out (its fd released), as a stop would have.
        await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        client.ReceiveTimeout = 5000;
        var reset = Assert.Throws<SocketException>(() => client.Receive(new byte[1])); // aborted: RST
        Assert.Equal(SocketError.ConnectionReset, reset.SocketErrorCode);
        await listener.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
    }
    [Fact]
    public async Task A_throwing_stop_hook_still_cancels_everything_in_flight()
    {
        // The loop's Stopping event (the network closes its connections there) throws: the stop must still cancel the
        // requests in flight instead of waiting for them until its 10 s deadline.
        var reported = new ConcurrentQueue<Exception>();
        using var loop = new EventLoop(new EventLoopOptions { UnhandledException = reported.Enqueue });
        using var timeout = new NativeTimespec(TimeSpan.FromSeconds(30));
        var handler = new RecordingHandler(loop);
        var submitted = new TaskCompletionSource();
        loop.Schedule(_ => { handler.Submit(timeout.TimeoutSqe(), 1); submitted.SetResult(); }, null);
        await submitted.Task.WaitAsync(TimeSpan.FromSeconds(5));
        loop.Stopping += () => throw new InvalidOperationException("from a Stopping handler");
        await loop.StopAsync().WaitAsync(TimeSpan.FromSeconds(5));
        Assert.Contains(reported, e => e.Message == "from a Stopping handler");
    }

    [Fact]
    public async Task A_wakeup_read_the_loop_could_not_rearm_does_not_leave_it_deaf_to_posts()
    {
        // The loop sleeps in io_uring_enter and other threads wake it through an eventfd it keeps a READ armed on. If
        // that READ cannot be re-armed (no SQE: the SQ stayed full after an early submit), a sleeping loop used to stay
        // asleep through every later post.
        var reported = new ConcurrentQueue<Exception>();
        var faults = new FaultInjector([IoUringConstants.IORING_OP_NOP], [Errno.ECONNRESET], probability: 0, seed: 1);
        var loop = new EventLoop(new EventLoopOptions { Hooks = new() { Faults = faults }, UnhandledException = reported.Enqueue });
        try
        {
            await RunOnLoopAsync(loop); // started and idle

            faults.RefuseLoopSqes(1);
            for (int i = 0; i < 100 && faults.SqesRefused == 0; i++)
            {
                await Task.Delay(20); // asleep: this post's wake-up completes the READ, whose re-arm is refused
                await RunOnLoopAsync(loop).WaitAsync(TimeSpan.FromSeconds(10));
            }
            Assert.Equal(1, faults.SqesRefused);
            for (int i = 0; i < 3; i++)
            {
                await Task.Delay(50); // the loop is asleep again
                await RunOnLoopAsync(loop).WaitAsync(TimeSpan.FromSeconds(10)); // hang guard
            }
            Assert.Contains(reported, ex => ex is InvalidOperationException);
        }
        finally
        {
            await loop.StopAsync().WaitAsync(TimeSpan.FromSeconds(10)); // a deaf loop would not hear the stop either
        }
    }

    [Fact]
    public async Task A_stop_whose_cancel_the_loop_could_not_submit_still_cancels_what_is_in_flight()
    {
        // The stop cancels every request (one ASYNC_CANCEL, ANY | ALL). Without an SQE for it, the stop used to wait
        // out its 10 s deadline and leave with the requests never cancelled (the ring's close then dropped them).
        var reported = new ConcurrentQueue<Exception>();
        var faults = new FaultInjector([IoUringConstants.IORING_OP_NOP], [Errno.ECONNRESET], probability: 0, seed: 1);
        var loop = new EventLoop(new EventLoopOptions { Hooks = new() { Faults = faults }, UnhandledException = reported.Enqueue });
        var handler = new RecordingHandler(loop);
        (int reader, int writer) = SocketPairs.Create();
        try
        {
            var poll = new io_uring_sqe { opcode = IoUringConstants.IORING_OP_POLL_ADD, fd = reader, poll32_events = 1 /* POLLIN: never */ };
            await handler.OnLoopAsync(h => h.Submit(poll, 7));
            faults.RefuseLoopSqes(2); // the stop's cancel (and the wakeup's re-arm, if the stop's post woke the loop)
            await loop.StopAsync().WaitAsync(TimeSpan.FromSeconds(30)); // hang guard
            Assert.Contains(handler.Completions, c => c.Value == 7 && c.Result == -Errno.ECANCELED);
            Assert.True(faults.SqesRefused >= 1);
        }
        finally
        {
            Libc.close(reader);
            Libc.close(writer);
        }
    }

    private static Task RunOnLoopAsync(EventLoop loop)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(static s => ((TaskCompletionSource)s!).SetResult(), done);
        return done.Task;
    }
}
