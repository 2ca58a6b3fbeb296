using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Loops;

/// <summary>Custom submissions when the submission queue fills up mid-iteration, and when submitting fails.</summary>
public sealed class SubmissionQueueTests
{
    private static Task OnLoopAsync(EventLoop loop, Action action) => LoopFailureTests.RunOnLoopAsync(loop, action);

    /// <summary>Submits NOPs (value 0) until exactly <paramref name="room"/> SQEs are left in the SQ.</summary>
    private static void FillSqUntil(RecordingHandler handler, uint room)
    {
        while (handler.Loop.Ring.SqSpace() > room)
        {
            handler.Submit(RecordingHandler.Nop(), 0);
        }
        Assert.Equal(room, handler.Loop.Ring.SqSpace());
    }

    [Fact]
    public async Task A_linked_chain_reaching_a_full_sq_is_not_split()
    {
        using var loop = new EventLoop(new EventLoopOptions { SubmissionQueueSize = 4 });
        using var handler = new RecordingHandler(loop);
        int fillers = 0;
        await OnLoopAsync(loop, () =>
        {
            FillSqUntil(handler, room: 1);
            fillers = handler.InFlight;
            // A READ on a bad fd fails; the NOP linked to it must then be cancelled, not run on its own.
            handler.Submit(new io_uring_sqe { opcode = IORING_OP_READ, fd = -1, flags = IOSQE_IO_LINK }, 1);
            handler.Submit(RecordingHandler.Nop(), 2); // the SQ is full here
        });
        await handler.WaitForAsync(fillers + 2);
        Assert.Equal(-Errno.EBADF, handler.Completions.Single(c => c.Value == 1).Result);
        Assert.Equal(-Errno.ECANCELED, handler.Completions.Single(c => c.Value == 2).Result);
    }

    [Fact]
    public async Task A_linked_chain_longer_than_the_sq_is_refused_clearly_and_leaks_no_slot()
    {
        using var loop = new EventLoop(new EventLoopOptions { SubmissionQueueSize = 4 });
        using var handler = new RecordingHandler(loop);
        Exception? refused = null;
        await OnLoopAsync(loop, () =>
        {
            for (int i = 0; i < 5 && refused is null; i++)
            {
                try
                {
                    handler.Submit(new io_uring_sqe { opcode = IORING_OP_NOP, flags = IOSQE_IO_LINK }, (ulong)i);
                }
                catch (InvalidOperationException ex)
                {
                    refused = ex;
                }
            }
            // A request taken right after the refusal, in the same iteration (as the loop's own would be), neither
            // joins the refused chain nor finds the SQ still full.
            handler.Submit(RecordingHandler.Nop(), 98);
        });
        Assert.NotNull(refused);
        Assert.Contains("SubmissionQueueSize", refused.Message, StringComparison.Ordinal);
        // What was queued of the chain still completes; no slot is left rented.
        await Eventually.WaitForAsync(() => handler.InFlight == 0);
        Assert.Equal(0, handler.InFlight);
        Assert.Equal(0, loop.CustomSlotsInUse);
        Assert.Contains(handler.Completions, c => c.Value == 98 && c.Result == 0);
        // And the loop goes on.
        await OnLoopAsync(loop, () => handler.Submit(RecordingHandler.Nop(), 99));
        await Eventually.WaitForAsync(() => handler.Completions.Any(c => c.Value == 99));
        Assert.Contains(handler.Completions, c => c.Value == 99 && c.Result == 0);
    }

    [Fact]
    public async Task Buffers_recycled_before_a_full_sq_is_submitted_early_are_visible_to_that_submission()
    {
        using var loop = new EventLoop(new EventLoopOptions { SubmissionQueueSize = 4, BufferCount = 1, BufferSize = 64 });
        using var handler = new RecordingHandler(loop);
        (int reader, int writer) = SocketPair();
        try
        {
            ushort group = 0;
            await OnLoopAsync(loop, () => group = loop.ReceiveBuffers.UseGroup()); // fills the ring: on the loop
            io_uring_sqe recv = new() { opcode = IORING_OP_RECV, fd = reader, flags = IOSQE_BUFFER_SELECT, buf_group = group };
            // Take the ring's only buffer and hold it.
            Write(writer, (byte)'a');
            await OnLoopAsync(loop, () => handler.Submit(recv, 1));
            await handler.WaitForAsync(1);
            var first = handler.Completions.Single();
            Assert.Equal(1, first.Result);
            ushort bid = (ushort)(first.Flags >> IORING_CQE_BUFFER_SHIFT);

            // Give it back, then a RECV that needs it goes out in an early submit (the SQ fills behind it).
            Write(writer, (byte)'b');
            int before = handler.Completions.Count;
            int fillers = 0;
            await OnLoopAsync(loop, () =>
            {
                loop.ReceiveBuffers.Recycle(bid);
                FillSqUntil(handler, room: 2);
                fillers = handler.InFlight;
                handler.Submit(recv, 2);
                handler.Submit(RecordingHandler.Nop(), 0);
                handler.Submit(RecordingHandler.Nop(), 0); // the SQ is full here
            });
            await handler.WaitForAsync(fillers + 3);
            var second = handler.Completions.Single(c => c.Value == 2);
            Assert.Equal(1, second.Result); // not -ENOBUFS
        }
        finally
        {
            Libc.close(reader);
            Libc.close(writer);
        }
    }

    [Fact]
    public async Task A_submit_that_fails_after_taking_a_value_slot_gives_it_back()
    {
        var reported = new System.Collections.Concurrent.ConcurrentQueue<Exception>();
        using var loop = new EventLoop(new EventLoopOptions { SubmissionQueueSize = 2, UnhandledException = reported.Enqueue });
        Assert.True(loop.IsRingFdRegistered);
        using var handler = new RecordingHandler(loop);
        Exception? failed = null;
        int slots = -1, inFlight = -1;
        await OnLoopAsync(loop, () =>
        {
            // Break the ring for real: drop the loop thread's registration of the ring fd (index 0, the only one this
            // thread made), so every io_uring_enter of this loop fails with EBADF.
            Assert.Equal(1, UnregisterRingFdIndexZero(loop));
            try
            {
                for (int i = 0; i < 3; i++)
                {
                    handler.Submit(RecordingHandler.Nop(), (ulong)i); // the third finds the SQ full and cannot submit
                }
            }
            catch (IoUringException ex)
            {
                failed = ex;
            }
            slots = loop.CustomSlotsInUse;
            inFlight = handler.InFlight;
        });
        Assert.NotNull(failed);
        Assert.Equal(inFlight, slots); // one slot per request actually queued: none for the refused one
        // The loop cannot go on with a broken ring, but it stops: Stopped completes.
        await loop.Stopped.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Contains(reported, e => e is IoUringException);
    }

    private static unsafe void Write(int fd, byte value)
    {
        Assert.Equal(1, (int)Libc.write(fd, &value, 1));
    }

    private static unsafe (int Reader, int Writer) SocketPair()
    {
        int* fds = stackalloc int[2];
        Assert.Equal(0, Libc.socketpair(Libc.AF_UNIX, Libc.SOCK_STREAM | Libc.SOCK_CLOEXEC, 0, fds));
        return (fds[0], fds[1]);
    }

    private static unsafe int UnregisterRingFdIndexZero(EventLoop loop)
    {
        io_uring_rsrc_update update = new() { offset = 0 };
        return Libc.io_uring_register(loop.Ring.Fd, IORING_UNREGISTER_RING_FDS, &update, 1);
    }
}
