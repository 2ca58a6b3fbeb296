using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Loops;

/// <summary>
/// The event loop itself: its thread and scheduling policy, posted work and wake-ups, stopping with requests in flight,
/// CQ overflow, ring setup and its fallbacks, fds. Custom operations: <see cref="RingHandlerTests"/>.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class EventLoopTests
{
    [Theory]
    [InlineData(true, 3)]  // SCHED_BATCH
    [InlineData(false, 0)] // SCHED_OTHER
    public void Loop_thread_runs_under_the_scheduling_policy_the_options_ask_for(bool batch, int expectedPolicy)
    {
        string name = $"policy{Environment.TickCount64 % 100000:D5}{(batch ? 'b' : 'n')}"; // <= 15 chars: the kernel's comm
        using var loop = new EventLoop(new EventLoopOptions { ThreadName = name, BatchScheduling = batch });

        // The kernel's view of the thread (policy is field 41 of /proc/<pid>/task/<tid>/stat), not the loop's own flag.
        // Other threads of the process may exit between the listing and the reads: their files are gone, skip them
        // (the loop thread itself lives until the loop is disposed).
        string? stat = Directory.GetDirectories("/proc/self/task")
            .Where(task => ReadIfStillThere(Path.Combine(task, "comm"))?.TrimEnd('\n') == name)
            .Select(task => ReadIfStillThere(Path.Combine(task, "stat")))
            .SingleOrDefault();
        Assert.NotNull(stat);
        string[] fieldsAfterName = stat[(stat.LastIndexOf(')') + 2)..].Split(' '); // field 3 onwards
        Assert.Equal(expectedPolicy, int.Parse(fieldsAfterName[41 - 3], System.Globalization.CultureInfo.InvariantCulture));
        Assert.Equal(batch, loop.IsBatchScheduled);
        Assert.Equal(0, loop.BatchSchedulingError);
    }

    private static string? ReadIfStillThere(string path)
    {
        try
        {
            return File.ReadAllText(path);
        }
        catch (IOException) // DirectoryNotFoundException, FileNotFoundException, ESRCH: the thread exited
        {
            return null;
        }
    }

    [Fact]
    public async Task The_loop_thread_is_recognized_by_its_stack_and_no_other_thread_is()
    {
        var loop = new EventLoop();
        var onLoop = new TaskCompletionSource<(bool Direct, bool Nested)>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(_ => onLoop.SetResult((loop.IsOnLoopThread, DeepIsOnLoopThread(loop, 200))), null);

        Assert.True(loop.KnowsThreadStack); // glibc answers pthread_getattr_np: the fast test is the one exercised
        Assert.Equal((true, true), await onLoop.Task.WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.False(loop.IsOnLoopThread);
        Assert.False(await Task.Run(() => loop.IsOnLoopThread));
        Assert.False(await Task.Factory.StartNew(() => DeepIsOnLoopThread(loop, 200), TaskCreationOptions.LongRunning));

        loop.Dispose();
        await loop.Stopped.WaitAsync(TimeSpan.FromSeconds(10));
        for (int i = 0; i < 100 && loop.KnowsThreadStack; i++)
        {
            await Task.Delay(10); // the thread clears the range as its very last step, after Stopped completes
        }
        Assert.False(loop.KnowsThreadStack); // a later thread given the same stack memory must not pass
        Assert.False(await Task.Factory.StartNew(() => loop.IsOnLoopThread, TaskCreationOptions.LongRunning));
    }

    // Recurses so the test runs deeper in the stack than the loop's own frames.
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.NoInlining)]
    private static bool DeepIsOnLoopThread(EventLoop loop, int depth)
    {
        Span<byte> padding = stackalloc byte[256];
        padding[0] = (byte)depth;
        return depth == 0 ? loop.IsOnLoopThread && padding[0] == 0 : DeepIsOnLoopThread(loop, depth - 1);
    }

    [Fact]
    public async Task Threads_started_from_a_batch_scheduled_loop_thread_run_under_the_normal_policy()
    {
        using var loop = new EventLoop(new EventLoopOptions { BatchScheduling = true });
        Assert.True(loop.IsBatchScheduled);
        var policies = new TaskCompletionSource<(int Loop, int Child)>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(_ =>
        {
            int loopPolicy = Libc.sched_getscheduler(0);
            int childPolicy = -1;
            var child = new Thread(() => childPolicy = Libc.sched_getscheduler(0)); // as the thread pool grows from here
            child.Start();
            child.Join();
            policies.SetResult((loopPolicy, childPolicy));
        }, null);
        (int loopPolicy, int childPolicy) = await policies.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal(Libc.SCHED_BATCH | Libc.SCHED_RESET_ON_FORK, loopPolicy);
        Assert.Equal(0, childPolicy); // SCHED_OTHER, without the reset flag
    }

    [Fact]
    public async Task Cq_overflow_with_a_tiny_cq_loses_no_completion()
    {
        using var loop = new EventLoop(new EventLoopOptions { SubmissionQueueSize = 4, CompletionQueueSize = 4 });
        using var handler = new RecordingHandler(loop);
        const int Total = 3000;
        // All submitted within one loop iteration: the SQ fills and is submitted 750 times before any CQE is reaped.
        await handler.OnLoopAsync(h =>
        {
            for (int i = 0; i < Total; i++)
            {
                h.Submit(RecordingHandler.Nop(), (ulong)i);
            }
        });
        await handler.WaitForAsync(Total);
        Assert.Equal(Enumerable.Range(0, Total).Select(i => (ulong)i), handler.Completions.Select(c => c.Value).Order());
        Assert.True(loop.Counters.CqOverflows > 0, "the CQ never overflowed; the test proves nothing");
        Assert.Equal(0u, loop.Ring.DroppedCompletions); // IORING_FEAT_NODROP: the kernel kept every one
        Assert.False(loop.Ring.HasCqOverflow);
    }

    /// <summary>Keeps the loop thread inside a work item until the returned gate is set: the loop is busy, never asleep.</summary>
    private static async Task<ManualResetEventSlim> HoldBusyAsync(EventLoop loop)
    {
        var gate = new ManualResetEventSlim();
        var blocked = new TaskCompletionSource();
        loop.Schedule(_ => { blocked.SetResult(); gate.Wait(); }, null);
        await blocked.Task;
        return gate;
    }

    [Fact]
    public async Task Posts_from_many_threads_to_a_busy_loop_all_run_without_waking_it()
    {
        using var loop = new EventLoop();
        using ManualResetEventSlim gate = await HoldBusyAsync(loop);
        long wakeupsBefore = loop.Counters.Wakeups;

        const int Threads = 4, PerThread = 25_000;
        int ran = 0, offLoop = 0;
        Action<object?> work = _ =>
        {
            if (!loop.IsOnLoopThread)
            {
                Interlocked.Increment(ref offLoop);
            }
            ran++; // loop thread only: no interlocked needed
        };
        await Task.WhenAll(Enumerable.Range(0, Threads).Select(_ => Task.Run(() =>
        {
            for (int i = 0; i < PerThread; i++)
            {
                loop.Schedule(work, null);
            }
        })));
        // The loop was running (blocked in our work item) the whole time: no poster needed a syscall.
        Assert.Equal(wakeupsBefore, loop.Counters.Wakeups);
        gate.Set();

        var done = new TaskCompletionSource();
        loop.Schedule(_ => done.SetResult(), null);
        await done.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal(Threads * PerThread, Volatile.Read(ref ran));
        Assert.Equal(0, offLoop);
    }

    [Fact]
    public async Task Posts_to_a_sleeping_loop_wake_it()
    {
        using var loop = new EventLoop();
        for (int round = 0; round < 50; round++)
        {
            await Task.Delay(2); // let the loop go to sleep in io_uring_enter
            var done = await Task.WhenAll(Enumerable.Range(0, 4).Select(_ => Task.Run(() =>
            {
                var tcs = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
                loop.Schedule(_ => tcs.SetResult(loop.IsOnLoopThread), null);
                return tcs.Task;
            }))).WaitAsync(TimeSpan.FromSeconds(10));
            Assert.All(done, Assert.True);
        }
        Assert.True(loop.Counters.Wakeups > 0);
    }

    [Fact]
    public async Task Wakeups_from_several_threads_at_once_are_all_counted()
    {
        // The meter's iouring.loop.wakeups: every eventfd write counts, whichever thread makes it (an application thread
        // posting to a sleeping loop, the thread pool's deferred wake, a blocking caller's PostAndWake). The loop is held
        // busy meanwhile, so the posts themselves wake nothing and each PostAndWake is exactly one write.
        using var loop = new EventLoop();
        using ManualResetEventSlim gate = await HoldBusyAsync(loop);
        long before = loop.Counters.Wakeups;
        const int Threads = 4, Each = 50_000;
        Action<object?> nothing = static _ => { };
        var start = new ManualResetEventSlim();
        Task[] wakers = Enumerable.Range(0, Threads).Select(_ => Task.Factory.StartNew(() =>
        {
            start.Wait();
            for (int i = 0; i < Each; i++)
            {
                loop.PostAndWake(nothing, null);
            }
        }, TaskCreationOptions.LongRunning)).ToArray();
        start.Set();
        try
        {
            await Task.WhenAll(wakers).WaitAsync(TimeSpan.FromSeconds(60));
            Assert.Equal(Threads * Each, loop.Counters.Wakeups - before);
        }
        finally
        {
            gate.Set();
        }
    }

    [Fact]
    public async Task Stopping_cancels_requests_in_flight_and_waits_for_their_completions()
    {
        var loop = new EventLoop();
        var handler = new RecordingHandler(loop);
        using var ts = new NativeTimespec(TimeSpan.FromHours(1));
        {
            await handler.OnLoopAsync(h =>
            {
                for (int i = 0; i < 10; i++)
                {
                    h.Submit(ts.TimeoutSqe(), (ulong)i);
                }
            });
            await loop.StopAsync().WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal(10, handler.Completions.Count);
            Assert.All(handler.Completions, c => Assert.Equal(-Errno.ECANCELED, c.Result));
            Assert.Equal(0, loop.InFlight);
            // After the stop, scheduled work still runs rather than throw (pipes call Schedule): on the thread pool, or
            // on the loop thread if it races the loop's last look at its queue as the thread leaves.
            var late = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            loop.Schedule(_ => late.SetResult(), null);
            await late.Task.WaitAsync(TimeSpan.FromSeconds(10));
            handler.Dispose();
            await handler.Released.WaitAsync(TimeSpan.FromSeconds(10));
            loop.Dispose();
        }
    }

    [Fact]
    public void Disposed_loops_leave_no_fd_open()
    {
        // Warm up once so lazily opened runtime fds are not counted. The kinds of fd a loop opens (its ring and its
        // eventfd) are counted, not the process total: a socket of an earlier test closing late moved that (165 vs 169).
        new EventLoop().Dispose();
        int eventfds = FdCount.Matching("[eventfd]");
        int rings = FdCount.Matching("io_uring");
        for (int i = 0; i < 20; i++)
        {
            var loop = new EventLoop();
            Assert.Equal(rings + 1, FdCount.Matching("io_uring"));
            loop.Dispose();
        }
        Assert.Equal(eventfds, FdCount.Matching("[eventfd]"));
        Assert.Equal(rings, FdCount.Matching("io_uring"));
    }

    [Fact]
    public void Loop_rings_are_enabled_on_the_loop_thread_with_the_best_flags_and_a_registered_fd()
    {
        using var loop = new EventLoop();
        Assert.NotEqual(0u, loop.SetupFlags & IORING_SETUP_DEFER_TASKRUN);
        Assert.NotEqual(0u, loop.SetupFlags & IORING_SETUP_SINGLE_ISSUER);
        Assert.NotEqual(0u, loop.SetupFlags & IORING_SETUP_R_DISABLED);
        Assert.True(loop.IsRingFdRegistered);
        using var withoutRegistration = new EventLoop(new EventLoopOptions { RegisterRingFd = false });
        Assert.False(withoutRegistration.IsRingFdRegistered);
    }

    [Fact]
    public void A_loop_falls_back_when_the_kernel_refuses_a_setup_flag()
    {
        using var loop = new EventLoop(new EventLoopOptions { Hooks = new() { RefusedSetupFlags = IORING_SETUP_DEFER_TASKRUN } });
        Assert.Equal(0u, loop.SetupFlags & IORING_SETUP_DEFER_TASKRUN);
        Assert.Equal(2, loop.RingSetupRefusals);
    }

    [Theory]
    [InlineData(Errno.EPERM)]
    [InlineData(Errno.ENOSYS)]
    public void A_loop_on_a_machine_without_io_uring_throws_naming_the_cause_and_leaks_nothing(int errno)
    {
        int before = FdCount.Current();
        var ex = Assert.Throws<IoUringUnavailableException>(() => new EventLoop(new EventLoopOptions { Hooks = new() { SetupErrno = errno } }));
        Assert.Contains("kernel.io_uring_disabled", ex.Message, StringComparison.Ordinal);
        Assert.Equal(before, FdCount.Current());
    }

    [Theory]
    [InlineData(nameof(EventLoopOptions.SubmissionQueueSize))]
    [InlineData(nameof(EventLoopOptions.CompletionQueueSize))]
    [InlineData(nameof(EventLoopOptions.BufferCount))]
    [InlineData(nameof(EventLoopOptions.BufferSize))]
    public void Invalid_options_throw_naming_the_option(string option)
    {
        var options = new EventLoopOptions();
        switch (option)
        {
            case nameof(EventLoopOptions.SubmissionQueueSize): options.SubmissionQueueSize = 100; break;
            case nameof(EventLoopOptions.CompletionQueueSize): options.CompletionQueueSize = 64; break;
            case nameof(EventLoopOptions.BufferCount): options.BufferCount = 0; break;
            case nameof(EventLoopOptions.BufferSize): options.BufferSize = 1; break;
        }
        var ex = Assert.Throws<ArgumentException>(() => new EventLoop(options));
        Assert.Equal(option, ex.ParamName);
        Assert.Contains(option, ex.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void GCHandle_values_leave_the_kind_and_tag_bits_of_user_data_free()
    {
        var handles = Enumerable.Range(0, 10_000).Select(_ => GCHandle.Alloc(new object())).ToList();
        try
        {
            Assert.All(handles, h => Assert.True(UserData.FitsHandle(GCHandle.ToIntPtr(h)), $"0x{GCHandle.ToIntPtr(h):x}"));
        }
        finally
        {
            handles.ForEach(h => h.Free());
        }
        ulong encoded = UserData.Encode(0x7FFF_1234_5678, kind: 5, tag: 0xFFFF);
        Assert.Equal(unchecked((nint)0x7FFF_1234_5678), UserData.Handle(encoded));
        Assert.Equal(5u, UserData.Kind(encoded));
        Assert.Equal(0xFFFFu, UserData.Tag(encoded));
    }
}
