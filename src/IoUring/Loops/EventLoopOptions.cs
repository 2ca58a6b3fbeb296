using System.Numerics;
using IoUring.Testing;

namespace IoUring.Loops;

/// <summary>Settings of one <see cref="EventLoop"/> and its ring.</summary>
public sealed class EventLoopOptions
{
    /// <summary>Submission queue entries: a power of two, 2 to 32768.</summary>
    /// <remarks>Defaults to 512. A full SQ is submitted early, so this bounds batching, not concurrency.</remarks>
    public int SubmissionQueueSize { get; set; } = 512;

    /// <summary>Completion queue entries: a power of two from <see cref="SubmissionQueueSize"/> to 65536, or 0 for 4 x
    /// the SQ.</summary>
    /// <remarks>Defaults to 0. Completions that do not fit wait in the kernel.</remarks>
    public int CompletionQueueSize { get; set; }

    /// <summary>Buffers in the loop's provided buffer ring: a power of two, 1 to 32768.</summary>
    /// <remarks>Defaults to 512. All connections of the loop receive into these and give them back at once.</remarks>
    public int BufferCount { get; set; } = 512;

    /// <summary>Size of each provided buffer in bytes.</summary>
    /// <remarks>Defaults to 8192.</remarks>
    public int BufferSize { get; set; } = 8192;

    /// <summary>Register the ring fd (IORING_REGISTER_RING_FDS), saving an fd lookup per io_uring_enter.</summary>
    /// <remarks>Defaults to true; ignored before kernel 5.18.</remarks>
    public bool RegisterRingFd { get; set; } = true;

    /// <summary>Run the loop thread under SCHED_BATCH: its wake-up does not preempt an application thread on the same
    /// CPU, so it handles more completions per iteration.</summary>
    /// <remarks>
    /// Defaults to true: a preempting wake-up costs two context switches. While every core runs application code,
    /// completions can wait up to a time slice (a few ms). <see cref="EventLoop.IsBatchScheduled"/> says whether the
    /// kernel allowed it.
    /// </remarks>
    public bool BatchScheduling { get; set; } = true;

    /// <summary>Let the kernel count the loop's sleeps with requests in flight as iowait: an idle loop then shows up to
    /// 100% iowait on its CPU.</summary>
    /// <remarks>Defaults to false (<see cref="EventLoop.SuppressesIoWait"/>; docs/deployment.md). Set true to keep the
    /// cpufreq boost some governors give to tasks in iowait.</remarks>
    public bool ReportIoWait { get; set; }

    /// <summary>Bytes per block of <see cref="EventLoop.MemoryPool"/>: a power of two from 4 KiB to 256 KiB.</summary>
    /// <remarks>Defaults to 16 KiB (fewer pipe segments in bulk transfers). A connection holding a few bytes holds
    /// whole blocks, so servers of many slow connections may prefer 4 KiB.</remarks>
    public int MemoryBlockSize { get; set; } = 16 * 1024;

    /// <summary>Receives exceptions thrown by completion handlers; the loop keeps running.</summary>
    /// <remarks>Defaults to null (the exception is dropped after the owner is told).</remarks>
    public Action<Exception>? UnhandledException { get; set; }

    /// <summary>Name of the loop thread.</summary>
    /// <remarks>Defaults to "io_uring loop".</remarks>
    public string ThreadName { get; set; } = "io_uring loop";

    // Test seams; null in production.
    internal TestHooks? Hooks { get; set; }

    /// <summary>Throws <see cref="ArgumentException"/> naming the first invalid setting.</summary>
    public void Validate()
    {
        if (SubmissionQueueSize < 2 || SubmissionQueueSize > 32768 || !BitOperations.IsPow2(SubmissionQueueSize))
        {
            throw new ArgumentException(
                $"{nameof(SubmissionQueueSize)} must be a power of two between 2 and 32768 " +
                $"(was {SubmissionQueueSize}).", nameof(SubmissionQueueSize));
        }
        if (CompletionQueueSize != 0 && (CompletionQueueSize < SubmissionQueueSize || CompletionQueueSize > 65536
            || !BitOperations.IsPow2(CompletionQueueSize)))
        {
            throw new ArgumentException(
                $"{nameof(CompletionQueueSize)} must be 0 or a power of two between {nameof(SubmissionQueueSize)} " +
                $"({SubmissionQueueSize}) and 65536 (was {CompletionQueueSize}).", nameof(CompletionQueueSize));
        }
        if (BufferCount < 1 || BufferCount > 32768 || !BitOperations.IsPow2(BufferCount))
        {
            throw new ArgumentException(
                $"{nameof(BufferCount)} must be a power of two between 1 and 32768 (was {BufferCount}).",
                nameof(BufferCount));
        }
        if (BufferSize < 64 || BufferSize > 1 << 24)
        {
            throw new ArgumentException(
                $"{nameof(BufferSize)} must be between 64 bytes and 16 MiB (was {BufferSize}).", nameof(BufferSize));
        }
        if (MemoryBlockSize < 4096 || MemoryBlockSize > 256 * 1024 || !BitOperations.IsPow2(MemoryBlockSize))
        {
            throw new ArgumentException(
                $"{nameof(MemoryBlockSize)} must be a power of two between 4096 and 262144 (was {MemoryBlockSize}).",
                nameof(MemoryBlockSize));
        }
        if (string.IsNullOrEmpty(ThreadName))
        {
            throw new ArgumentException($"{nameof(ThreadName)} must not be empty.", nameof(ThreadName));
        }
    }

    /// <summary>A copy (test seams included) for one loop of a network.</summary>
    internal EventLoopOptions WithThreadName(string name)
    {
        var copy = (EventLoopOptions)MemberwiseClone();
        copy.ThreadName = name;
        return copy;
    }
}
