using System.Security.Cryptography;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Testing;
using IoUring.Tests.Support;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Tests.Loops;

/// <summary>
/// <see cref="EventLoop.ReadAsync"/>: the bytes RandomAccess reads, at any offset and size, into arrays and into the
/// loop's own (registered) pool; the end of the file; many reads at once; errors named (EBADF for a
/// handle not open for reading: .NET will not open a directory, so EISDIR is not shown); cancellation of a read the
/// kernel holds; a loop that stops under a read; the file and buffer given back.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class FileReadTests : IDisposable
{
    private const int FileLength = 3 * 1024 * 1024 + 123;
    private readonly string _path = Path.Combine(Path.GetTempPath(), $"iouring-read-{Guid.NewGuid():N}.bin");
    private readonly byte[] _content = RandomNumberGenerator.GetBytes(FileLength);

    public FileReadTests() => File.WriteAllBytes(_path, _content);

    public void Dispose() => File.Delete(_path);

    [Theory]
    [InlineData(0, 1)]
    [InlineData(0, 4096)]
    [InlineData(1, 4095)]
    [InlineData(4095, 4097)]
    [InlineData(1234567, 1024 * 1024)]
    [InlineData(FileLength - 10, 10)]
    public async Task Reads_the_bytes_random_access_reads(long offset, int length)
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        var buffer = new byte[length];
        int read = await loop.ReadAsync(file, buffer, offset);
        Assert.Equal(length, read);
        Assert.True(_content.AsSpan((int)offset, length).SequenceEqual(buffer));
    }

    [Fact]
    public async Task A_buffer_that_cannot_be_pinned_fails_the_read_and_leaves_the_file_to_close()
    {
        using var loop = new EventLoop();
        SafeFileHandle file = File.OpenHandle(_path);
        int fd = (int)file.DangerousGetHandle();
        using var unpinnable = new UnpinnableMemory(100);

        await Assert.ThrowsAsync<NotSupportedException>(async () => await loop.ReadAsync(file, unpinnable.Memory, 0));

        file.Dispose(); // closes the fd, unless a reference to the handle was left taken
        Assert.NotEqual(_path, new FileInfo($"/proc/self/fd/{fd}").LinkTarget);
    }

    /// <summary>Memory whose Pin throws, as a caller's own MemoryManager may.</summary>
    private sealed class UnpinnableMemory(int size) : System.Buffers.MemoryManager<byte>
    {
        private readonly byte[] _array = new byte[size];

        public override Span<byte> GetSpan() => _array;

        public override System.Buffers.MemoryHandle Pin(int elementIndex = 0) => throw new NotSupportedException("no pinning here");

        public override void Unpin()
        {
        }

        protected override void Dispose(bool disposing)
        {
        }
    }

    [Fact]
    public async Task Reads_fewer_bytes_at_the_end_and_none_past_it()
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        var buffer = new byte[100];
        Assert.Equal(40, await loop.ReadAsync(file, buffer, FileLength - 40));
        Assert.True(_content.AsSpan(FileLength - 40).SequenceEqual(buffer.AsSpan(0, 40)));
        Assert.Equal(0, await loop.ReadAsync(file, buffer, FileLength));
        Assert.Equal(0, await loop.ReadAsync(file, buffer, FileLength + 5000));
        Assert.Equal(0, await loop.ReadAsync(file, Memory<byte>.Empty, 0));
    }

    [Fact]
    public async Task Reads_into_the_loops_pool_memory_the_whole_file_block_by_block()
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        var copy = new byte[FileLength];
        long offset = 0;
        while (offset < FileLength)
        {
            using System.Buffers.IMemoryOwner<byte> block = loop.MemoryPool.Rent();
            int read = await loop.ReadAsync(file, block.Memory, offset);
            Assert.True(read > 0);
            block.Memory.Span[..read].CopyTo(copy.AsSpan((int)offset));
            offset += read;
        }
        Assert.Equal(_content, copy);
        Assert.Equal(FileLength, loop.Counters.FileBytesRead);
    }

    [Fact]
    public async Task Many_reads_in_flight_at_once_each_get_their_own_bytes()
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        const int Reads = 300, Length = 8192;
        var buffers = new byte[Reads][];
        var tasks = new Task<int>[Reads];
        for (int i = 0; i < Reads; i++)
        {
            buffers[i] = new byte[Length];
            tasks[i] = loop.ReadAsync(file, buffers[i], (long)i * 9001).AsTask();
        }
        int[] results = await Task.WhenAll(tasks);
        for (int i = 0; i < Reads; i++)
        {
            Assert.Equal(Length, results[i]);
            Assert.True(_content.AsSpan(i * 9001, Length).SequenceEqual(buffers[i]), $"read {i}");
        }
        Assert.Equal(Reads, loop.Counters.FileReads);
    }

    [Fact]
    public async Task The_continuation_runs_off_the_loop_thread()
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        // A continuation that runs where the read's task completes: never the loop thread.
        bool onLoop = await loop.ReadAsync(file, new byte[10], 0).AsTask()
            .ContinueWith(_ => loop.IsOnLoopThread, TaskContinuationOptions.ExecuteSynchronously);
        Assert.False(onLoop);
    }

    [Fact]
    public async Task Errors_name_the_problem()
    {
        using var loop = new EventLoop();
        using (SafeFileHandle writeOnly = File.OpenHandle(_path, FileMode.Open, FileAccess.Write))
        {
            IOException error = await Assert.ThrowsAsync<IOException>(
                async () => await loop.ReadAsync(writeOnly, new byte[10], 0));
            Assert.Contains("EBADF", error.Message, StringComparison.Ordinal);
        }
        SafeFileHandle closed = File.OpenHandle(_path);
        closed.Dispose();
        Assert.Throws<ObjectDisposedException>(() => loop.ReadAsync(closed, new byte[10], 0));
        using SafeFileHandle file = File.OpenHandle(_path);
        Assert.Throws<ArgumentOutOfRangeException>(() => loop.ReadAsync(file, new byte[10], -1));
        Assert.Throws<ArgumentNullException>(() => loop.ReadAsync(null!, new byte[10], 0));
        Assert.True(loop.ReadAsync(file, new byte[10], 0, new CancellationToken(canceled: true)).IsCanceled);
        // The loop goes on after the failures.
        Assert.Equal(10, await loop.ReadAsync(file, new byte[10], 0));
    }

    [Fact]
    public async Task A_read_the_kernel_holds_is_cancelled_by_its_token_and_gives_back_the_buffer_and_file()
    {
        using var loop = new EventLoop();
        (SafeFileHandle readEnd, SafeFileHandle writeEnd) = Pipe();
        using (writeEnd)
        {
            var buffer = new byte[64];
            using var cts = new CancellationTokenSource();
            ValueTask<int> pending = loop.ReadAsync(readEnd, buffer, 0, cts.Token);
            await Task.Delay(100);
            Assert.False(pending.IsCompleted); // an empty pipe: the kernel waits for bytes
            cts.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(async () => await pending);
            await Eventually.WaitForAsync(() => loop.InFlight <= 1); // the read's final completion (the wakeup READ stays)
            readEnd.Dispose();
            Assert.True(readEnd.IsClosed); // no reference held: the fd is closed now, not later

            // The same kind of read, not cancelled, completes with the bytes written (the pool's reused reads work).
            (SafeFileHandle r2, SafeFileHandle w2) = Pipe();
            using (r2)
            using (w2)
            {
                ValueTask<int> next = loop.ReadAsync(r2, buffer, 0);
                using (var writer = new FileStream(w2, FileAccess.Write, bufferSize: 0))
                {
                    writer.Write("hello"u8);
                }
                Assert.Equal(5, await next);
                Assert.Equal("hello"u8.ToArray(), buffer[..5]);
            }
        }
    }

    [Fact]
    public async Task A_loop_that_stops_under_a_read_fails_it_as_disposed_and_refuses_new_ones()
    {
        var loop = new EventLoop();
        (SafeFileHandle readEnd, SafeFileHandle writeEnd) = Pipe();
        using (readEnd)
        using (writeEnd)
        {
            ValueTask<int> pending = loop.ReadAsync(readEnd, new byte[64], 0);
            await Task.Delay(50);
            loop.Dispose();
            await Assert.ThrowsAsync<ObjectDisposedException>(async () => await pending);
            using SafeFileHandle file = File.OpenHandle(_path);
            Assert.Throws<ObjectDisposedException>(() => loop.ReadAsync(file, new byte[64], 0));
        }
    }

    [Fact]
    public async Task A_read_still_in_the_kernel_when_the_stop_gives_up_fails_its_awaiter_and_keeps_the_file()
    {
        // The stop's cancel never reaches the kernel (refused here; a read on a hung network file system ignores it):
        // the stop waits out its deadline and leaves with the read in flight. Its awaiter used to wait for ever.
        var faults = new FaultInjector([IoUringConstants.IORING_OP_NOP], [Errno.EIO], probability: 0, seed: 1);
        var loop = new EventLoop(new EventLoopOptions
        {
            Hooks = new() { Faults = faults, ShutdownDeadline = TimeSpan.FromMilliseconds(300) },
            UnhandledException = _ => { }, // the refused cancels, and the requests left in flight
        });
        (SafeFileHandle readEnd, SafeFileHandle writeEnd) = Pipe();
        using (writeEnd)
        {
            ValueTask<int> pending = loop.ReadAsync(readEnd, new byte[64], 0);
            await Eventually.WaitForAsync(() => loop.InFlight >= 2); // the wakeup READ and this read
            faults.RefuseLoopSqes(int.MaxValue);
            await loop.StopAsync().WaitAsync(TimeSpan.FromSeconds(30)); // hang guard

            Task<int> read = pending.AsTask();
            await Task.WhenAny(read, Task.Delay(TimeSpan.FromSeconds(10)));
            Assert.True(read.IsCompleted, "the read's awaiter still waits after the loop stopped");
            ObjectDisposedException error = await Assert.ThrowsAsync<ObjectDisposedException>(() => read);
            Assert.Contains("stop", error.Message, StringComparison.Ordinal);

            // The kernel may still read into the buffer and from the file: the file stays referenced, so its fd (and
            // that number) is not given back, whatever the caller does with the handle.
            int fd = (int)readEnd.DangerousGetHandle();
            readEnd.Dispose();
            Assert.False(readEnd.IsClosed);
            Assert.True(File.Exists($"/proc/self/fd/{fd}"));
        }
    }

    [Fact]
    public async Task A_read_the_loop_has_no_sqe_for_when_it_stops_fails_and_leaves_the_file_to_close()
    {
        // The loop refuses the read's SQE again and again (as when the SQ stays full after an early submit): it is tried
        // every iteration, and the stop comes while it is. It never reached the kernel: it must fail and give the file
        // back, so that the handle's Dispose closes the fd.
        var faults = new FaultInjector([IoUringConstants.IORING_OP_NOP], [Errno.EIO], probability: 0, seed: 1);
        var loop = new EventLoop(new EventLoopOptions
        {
            Hooks = new() { Faults = faults, ShutdownDeadline = TimeSpan.FromMilliseconds(300) },
            UnhandledException = _ => { }, // the refusals
        });
        (SafeFileHandle readEnd, SafeFileHandle writeEnd) = Pipe();
        using (writeEnd)
        {
            faults.RefuseSqes(int.MaxValue);
            ValueTask<int> pending = loop.ReadAsync(readEnd, new byte[64], 0);
            await Eventually.WaitForAsync(() => faults.SqesRefused >= 3); // its retries are under way
            await loop.StopAsync().WaitAsync(TimeSpan.FromSeconds(30));

            Task<int> read = pending.AsTask();
            await Task.WhenAny(read, Task.Delay(TimeSpan.FromSeconds(10)));
            Assert.True(read.IsCompleted, "the read's awaiter still waits after the loop stopped");
            await Assert.ThrowsAsync<ObjectDisposedException>(() => read);
            readEnd.Dispose();
            Assert.True(readEnd.IsClosed); // no reference held: the fd is closed now
        }
    }

    [Fact]
    public async Task Tokens_cancelled_after_their_read_completed_do_not_touch_later_reads()
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        var buffer = new byte[4096];
        for (int i = 0; i < 2000; i++)
        {
            using var cts = new CancellationTokenSource();
            long offset = (i * 7919L) % (FileLength - buffer.Length);
            Assert.Equal(buffer.Length, await loop.ReadAsync(file, buffer, offset, cts.Token));
            cts.Cancel(); // posts a cancel that must find the read reused (or idle) and leave it alone
            Assert.True(_content.AsSpan((int)offset, buffer.Length).SequenceEqual(buffer), $"read {i}");
        }
    }

    // Review: ValueTask<int>.Result on an IValueTaskSource calls GetResult directly. FileRead.GetResult resets the
    // source and pools it in a finally, also when GetResult throws (not completed yet, or a token already taken).
    [Fact]
    public async Task Result_of_a_pending_read_does_not_hand_its_source_to_the_next_read()
    {
        using var loop = new EventLoop();
        (SafeFileHandle r1, SafeFileHandle w1) = Pipe();
        (SafeFileHandle r2, SafeFileHandle w2) = Pipe();
        using (r1) using (w1) using (r2) using (w2)
        {
            var buffer1 = new byte[64];
            var buffer2 = new byte[64];
            ValueTask<int> first = loop.ReadAsync(r1, buffer1, 0);
            await Task.Delay(50);
            Assert.ThrowsAny<InvalidOperationException>(() => first.Result); // misuse: not completed yet
            ValueTask<int> second = loop.ReadAsync(r2, buffer2, 0);
            await Task.Delay(50);
            WriteTo(w1, "hello"u8);
            await Task.Delay(200);
            // Nothing was written to the second read's pipe: it must still wait (its buffer pinned, its file held).
            Assert.False(second.IsCompleted, "the second read completed with the first read's bytes");
            WriteTo(w2, "x"u8);
        }
    }

    [Fact]
    public async Task A_result_taken_twice_does_not_pool_the_source_twice()
    {
        using var loop = new EventLoop();
        using SafeFileHandle file = File.OpenHandle(_path);
        ValueTask<int> done = loop.ReadAsync(file, new byte[16], 0);
        Assert.Equal(16, await done);
        Assert.ThrowsAny<InvalidOperationException>(() => done.Result); // misuse: the result was taken
        (SafeFileHandle r1, SafeFileHandle w1) = Pipe();
        (SafeFileHandle r2, SafeFileHandle w2) = Pipe();
        using (r1) using (w1) using (r2) using (w2)
        {
            ValueTask<int> first = loop.ReadAsync(r1, new byte[64], 0);
            await Task.Delay(50);
            ValueTask<int> second = loop.ReadAsync(r2, new byte[64], 0);
            await Task.Delay(50);
            WriteTo(w1, "hello"u8);
            await Task.Delay(200);
            Assert.False(second.IsCompleted, "two reads in flight share one pooled source");
            WriteTo(w2, "x"u8);
        }
    }

    [Fact]
    public async Task A_first_read_that_reaches_a_stopping_loop_leaves_no_owner_behind()
    {
        var loop = new EventLoop();
        using var hold = new ManualResetEventSlim();
        loop.Schedule(_ => hold.Wait(), null); // the loop thread waits here
        Task stopped = loop.StopAsync();        // BeginStop is queued after it
        using SafeFileHandle file = File.OpenHandle(_path);
        ValueTask<int> read = loop.ReadAsync(file, new byte[16], 0); // the submit is queued after the stop
        hold.Set();
        await Assert.ThrowsAsync<ObjectDisposedException>(async () => await read);
        await stopped;
        Assert.Equal(0, loop.LiveOwners); // FileReads made during the stop subscribed to Stopping too late
    }

    private static void WriteTo(SafeFileHandle pipe, ReadOnlySpan<byte> bytes)
    {
        using var writer = new FileStream(new SafeFileHandle(pipe.DangerousGetHandle(), ownsHandle: false),
            FileAccess.Write, bufferSize: 0);
        writer.Write(bytes);
    }

    private static unsafe (SafeFileHandle Read, SafeFileHandle Write) Pipe()
    {
        int* fds = stackalloc int[2];
        Assert.Equal(0, Libc.pipe2(fds, Libc.O_CLOEXEC));
        return (new SafeFileHandle(fds[0], ownsHandle: true), new SafeFileHandle(fds[1], ownsHandle: true));
    }
}
