using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Loops;

/// <summary>
/// Custom operations through <see cref="RingHandler"/>: every 64-bit value comes back once, results arrive unchanged,
/// timeouts fire in order, a stale completion never reaches a new handler, and misuse is refused.
/// What a throwing handler does to its loop is in <see cref="LoopFailureTests"/>.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class RingHandlerTests
{
    [Fact]
    public async Task Custom_operations_return_every_random_64bit_value_exactly_once()
    {
        using var loop = new EventLoop();
        using var handler = new RecordingHandler(loop);
        var random = new Random(1234);
        var values = new ulong[5000];
        random.NextBytes(MemoryMarshal.AsBytes(values.AsSpan()));
        values[0] = 0;
        values[1] = ulong.MaxValue;
        values[2] = 1UL << 63;

        // Batches of varying size, each submitted from the loop thread in one iteration.
        int offset = 0;
        while (offset < values.Length)
        {
            int batch = Math.Min(values.Length - offset, random.Next(1, 700));
            int start = offset;
            await handler.OnLoopAsync(h =>
            {
                for (int i = start; i < start + batch; i++)
                {
                    h.Submit(RecordingHandler.Nop(), values[i]);
                }
            });
            offset += batch;
        }
        await handler.WaitForAsync(values.Length);

        Assert.Equal(values.OrderBy(v => v), handler.Completions.Select(c => c.Value).OrderBy(v => v));
        Assert.All(handler.Completions, c => Assert.Equal(0, c.Result));
        Assert.Equal(0, handler.InFlight);
        Assert.Equal(0, loop.CustomSlotsInUse);
    }

    [NopInjectFact]
    public async Task Nop_with_an_injected_result_reaches_the_handler_unchanged()
    {
        using var loop = new EventLoop();
        using var handler = new RecordingHandler(loop);
        await handler.OnLoopAsync(h => h.Submit(new io_uring_sqe { opcode = IORING_OP_NOP, nop_flags = IORING_NOP_INJECT_RESULT, len = unchecked((uint)-Errno.ECONNRESET) }, 42));
        await handler.WaitForAsync(1);
        Assert.Equal((42UL, -Errno.ECONNRESET), (handler.Completions.Single().Value, handler.Completions.Single().Result));
    }

    [Fact]
    public async Task Timeouts_fire_through_the_loop_and_ordering_follows_their_deadlines()
    {
        using var loop = new EventLoop();
        using var handler = new RecordingHandler(loop);
        using var slow = new NativeTimespec(TimeSpan.FromMilliseconds(60));
        using var fast = new NativeTimespec(TimeSpan.FromMilliseconds(10));
        await handler.OnLoopAsync(h =>
        {
            h.Submit(slow.TimeoutSqe(), 60);
            h.Submit(fast.TimeoutSqe(), 10);
        });
        await handler.WaitForAsync(2);
        Assert.Equal([10UL, 60UL], handler.Completions.Select(c => c.Value));
        Assert.All(handler.Completions, c => Assert.Equal(-Errno.ETIME, c.Result));
    }

    [Fact]
    public async Task A_stale_completion_never_reaches_a_new_owner()
    {
        using var loop = new EventLoop();
        using var ts = new NativeTimespec(TimeSpan.FromSeconds(1)); // long enough to outlast the checks below under emulation (tests/kernels)
        {
            var old = new RecordingHandler(loop);
            await old.OnLoopAsync(h => h.Submit(ts.TimeoutSqe(), 0x01D));
            old.Dispose();

            // The old owner is released but its request is in flight: its handle must not be freed, so the
            // handles allocated now can never take its place.
            var fresh = Enumerable.Range(0, 200).Select(_ => new RecordingHandler(loop)).ToList();
            await old.OnLoopAsync(_ => { });
            Assert.Equal(1, old.InFlight);
            Assert.False(old.Released.IsCompleted);

            await old.Released.WaitAsync(TimeSpan.FromSeconds(10));
            var completion = Assert.Single(old.Completions);
            Assert.Equal((0x01DUL, -Errno.ETIME), (completion.Value, completion.Result));
            Assert.All(fresh, h => Assert.Empty(h.Completions));
            fresh.ForEach(h => h.Dispose());
        }
    }

    [Fact]
    public async Task Submitting_after_dispose_or_off_the_loop_thread_is_refused()
    {
        using var loop = new EventLoop();
        var handler = new RecordingHandler(loop);
        Assert.Throws<InvalidOperationException>(() => handler.Submit(RecordingHandler.Nop(), 1));
        await handler.OnLoopAsync(h => Assert.Throws<ArgumentException>(() => h.Submit(new io_uring_sqe { flags = IOSQE_CQE_SKIP_SUCCESS }, 1)));
        handler.Dispose();
        await handler.Released.WaitAsync(TimeSpan.FromSeconds(10));
        await handler.OnLoopAsync(h => Assert.Throws<ObjectDisposedException>(() => h.Submit(RecordingHandler.Nop(), 1)));
    }
}
