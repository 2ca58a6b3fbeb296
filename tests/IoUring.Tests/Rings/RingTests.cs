using IoUring.Interop;
using IoUring.Rings;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Rings;

/// <summary>The raw ring on the test thread (its single issuer): NOPs, registered fd, timeouts, setup fallback, overflow.</summary>
[Collection(Support.FdCountingCollection.Name)]
public sealed unsafe class RingTests
{
    private static List<io_uring_cqe> Drain(Ring ring)
    {
        var list = new List<io_uring_cqe>();
        uint ready = ring.ReadyCompletions(out uint head);
        for (uint i = 0; i < ready; i++)
        {
            list.Add(*ring.CqeAt(head + i));
        }
        ring.AdvanceCq(ready);
        return list;
    }

    private static io_uring_sqe* QueueTimeout(Ring ring, __kernel_timespec* ts, ulong userData)
    {
        io_uring_sqe* sqe = ring.TryGetSqe();
        sqe->opcode = IORING_OP_TIMEOUT;
        sqe->addr = (ulong)ts;
        sqe->len = 1;
        sqe->user_data = userData;
        return sqe;
    }

    private static void QueueNop(Ring ring, ulong userData)
    {
        io_uring_sqe* sqe = ring.TryGetSqe();
        Assert.True(sqe != null, "SQ unexpectedly full");
        sqe->opcode = IORING_OP_NOP;
        sqe->user_data = userData;
    }

    [Theory]
    [InlineData(1, true)]
    [InlineData(1, false)]
    [InlineData(32, true)]
    [InlineData(32, false)]
    public void Nops_round_trip_single_and_batched_with_and_without_registered_ring_fd(int batch, bool registerRingFd)
    {
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 64, RegisterRingFd = registerRingFd });
        Assert.Equal(registerRingFd, ring.IsRingFdRegistered);
        var seen = new HashSet<ulong>();
        for (int round = 0; round < 10; round++)
        {
            for (int i = 0; i < batch; i++)
            {
                QueueNop(ring, (ulong)(uint)(round * batch + i) | 0xA5A5_0000_0000_0000UL);
            }
            Assert.Equal((uint)batch, ring.PendingSubmissions);
            ring.SubmitAndWait((uint)batch);
            foreach (io_uring_cqe cqe in Drain(ring))
            {
                Assert.Equal(0, cqe.res);
                Assert.True(seen.Add(cqe.user_data), "duplicate completion");
            }
        }
        Assert.Equal(10 * batch, seen.Count);
    }

    [Fact]
    public void Enter_with_a_timeout_returns_ETIME_when_nothing_completes()
    {
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        __kernel_timespec ts = new() { tv_nsec = 20_000_000 };
        long start = Environment.TickCount64;
        int result;
        do
        {
            result = ring.Enter(minComplete: 1, &ts); // a signal ends the wait early (-EINTR): wait again
        }
        while (result == -Errno.EINTR);
        Assert.Equal(-Errno.ETIME, result);
        Assert.True(Environment.TickCount64 - start >= 15, "the wait ended before its timeout");
    }

    [Fact]
    public void A_signal_ends_a_wait_with_EINTR_and_the_completion_arrives_on_the_next_wait()
    {
        // How the CI run of 2026-11-25 lost a timeout's CQE: a signal whose handler does not ask for a restart (the
        // runtime's own SIGRTMIN, which it sends to threads to suspend them for the GC) reached the waiting thread,
        // io_uring_enter returned early and the test read an empty CQ.
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        __kernel_timespec* ts = stackalloc __kernel_timespec[1];
        ts->tv_nsec = 400_000_000;
        QueueTimeout(ring, ts, 7);
        int pid = Environment.ProcessId;
        int tid = gettid();
        var signaller = new Thread(() =>
        {
            Thread.Sleep(50);
            Assert.Equal(0, tgkill(pid, tid, __libc_current_sigrtmin()));
        });
        signaller.Start();

        int result = ring.Enter(minComplete: 1);
        signaller.Join();
        // The SQE was submitted before the wait began: the enter reports it (1) or the interruption (-EINTR).
        Assert.True(result == 1 || result == -Errno.EINTR, $"enter returned {result}");
        Assert.Equal(0u, ring.ReadyCompletions(out _));

        ring.SubmitAndWait(1);
        io_uring_cqe cqe = Assert.Single(Drain(ring));
        Assert.Equal(7UL, cqe.user_data);
        Assert.Equal(-Errno.ETIME, cqe.res);
    }

    [System.Runtime.InteropServices.DllImport("libc")]
    private static extern int __libc_current_sigrtmin();

    [System.Runtime.InteropServices.DllImport("libc", SetLastError = true)]
    private static extern int gettid();

    [System.Runtime.InteropServices.DllImport("libc", SetLastError = true)]
    private static extern int tgkill(int tgid, int tid, int sig);

    [Fact]
    public void Timeout_request_completes_with_ETIME_and_a_count_timeout_with_zero()
    {
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        __kernel_timespec* ts = stackalloc __kernel_timespec[1];
        ts->tv_nsec = 10_000_000;
        QueueTimeout(ring, ts, 7);
        ring.SubmitAndWait(1);
        io_uring_cqe cqe = Assert.Single(Drain(ring));
        Assert.Equal(7UL, cqe.user_data);
        Assert.Equal(-Errno.ETIME, cqe.res);

        // A timeout with off = 1 completes (res 0) as soon as one other completion arrives.
        QueueTimeout(ring, ts, 8)->off = 1;
        ts->tv_sec = 60;
        QueueNop(ring, 9);
        ring.SubmitAndWait(2);
        var cqes = Drain(ring).ToDictionary(c => c.user_data, c => c.res);
        Assert.Equal(0, cqes[9]);
        Assert.Equal(0, cqes[8]);
    }

    [Fact]
    public void Setup_prefers_single_issuer_defer_taskrun_and_no_sqarray_on_this_kernel()
    {
        using Ring ring = Ring.Create(new RingOptions());
        // NO_SQARRAY is 6.6: older kernels (6.1) refuse the first attempt and the ring is set up without it.
        bool noSqArray = Support.KernelFeatures.AtLeast(6, 6);
        Assert.Equal((RingOptions.PreferredFlags & ~(noSqArray ? 0 : IORING_SETUP_NO_SQARRAY)) | IORING_SETUP_CQSIZE, ring.SetupFlags);
        Assert.Equal(noSqArray ? 0 : 1, ring.RefusedSetupAttempts);
        Assert.NotEqual(0u, ring.Features & IORING_FEAT_NODROP);
        Assert.Equal(4 * ring.SqEntries, ring.CqEntries);
    }

    [Theory]
    [InlineData(IORING_SETUP_NO_SQARRAY, 1)]
    [InlineData(IORING_SETUP_DEFER_TASKRUN, 2)]
    [InlineData(IORING_SETUP_SINGLE_ISSUER, 3)]
    [InlineData(IORING_SETUP_SUBMIT_ALL, 5)]
    public void Setup_falls_back_when_a_flag_is_refused_and_the_ring_still_works(uint refused, int expectedRefusals)
    {
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 16, Hooks = new() { RefusedSetupFlags = refused } });
        Assert.Equal(0u, ring.SetupFlags & refused);
        Assert.Equal(expectedRefusals, ring.RefusedSetupAttempts);
        for (int i = 0; i < 40; i++)
        {
            QueueNop(ring, (ulong)i);
            ring.SubmitAndWait(1);
            Assert.Equal((ulong)i, Assert.Single(Drain(ring)).user_data);
        }
    }

    [Fact]
    public void Ring_fd_is_close_on_exec_and_closed_by_dispose()
    {
        int before = Support.FdCount.Matching("io_uring");
        Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        Assert.Equal(before + 1, Support.FdCount.Matching("io_uring"));
        Assert.Equal(Libc.FD_CLOEXEC, Libc.fcntl(ring.Fd, Libc.F_GETFD, 0) & Libc.FD_CLOEXEC);
        ring.Dispose();
        Assert.Equal(before, Support.FdCount.Matching("io_uring"));
    }
}
