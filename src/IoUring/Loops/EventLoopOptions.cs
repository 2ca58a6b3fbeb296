using System.Numerics;
using IoUring.Testing;

namespace IoUring.Loops;

/// <summary>Settings of one <see cref="EventLoop"/> and its ring.</summary>
public sealed class EventLoopOptions
{
    /// <summary>Submission queue entries (power of two, 2..32768).</summary>
    /// <remarks>Defaults to 512. A full SQ is submitted early, so this bounds batching, not concurrency.</remarks>
    public int SubmissionQueueSize { get; set; } = 512;

    /// <summary>Completion queue entries (power of two, at least <see cref="SubmissionQueueSize"/>, at most 65536), or
    /// 0 for 4 x the SQ.</summary>
    /// <remarks>Defaults to 0 (4 x SQ). Completions that do not fit wait in the kernel and are flushed; none is
    /// lost.</remarks>
    public int CompletionQueueSize { get; set; }

    /// <summary>Buffers in the loop's provided buffer ring (power of two, 1..32768).</summary>
    /// <remarks>Defaults to 512. All connections of the loop receive into these and give them back at once.</remarks>
    public int BufferCount { get; set; } = 512;

    /// <summary>Size of each provided buffer in bytes.</summary>
    /// <remarks>Defaults to 8192.</remarks>
    public int BufferSize { get; set; } = 8192;

    /// <summary>Register the ring fd with the loop thread (IORING_REGISTER_RING_FDS), saving an fd lookup per
    /// io_uring_enter.</summary>
    /// <remarks>Defaults to true; ignored where the kernel lacks it (before 5.18).</remarks>
    public bool RegisterRingFd { get; set; } = true;

    /// <summary>
    /// Run the loop thread under Linux's SCHED_BATCH policy: a wake-up of the loop does not preempt an application
    /// thread on the same CPU; the loop runs when that thread blocks or its time slice ends, and handles everything
    /// that arrived meanwhile in one iteration.
    /// </summary>
    /// <remarks>
    /// Defaults to true: on a busy CPU each preempting wake-up costs two context switches for a handful of
    /// completions (docs/benchmarks.md, "Kestrel"). The loop keeps its fair share of CPU, but while application threads
    /// run CPU-bound on every core, completions can wait up to a time slice (a few ms). Set false for SCHED_OTHER.
    /// Where the policy cannot be set (a seccomp filter), <see cref="EventLoop.IsBatchScheduled"/> and
    /// <see cref="EventLoop.BatchSchedulingError"/> say so. Threads started from the loop thread start under the
    /// normal policy (SCHED_RESET_ON_FORK).
    /// </remarks>
    public bool BatchScheduling { get; set; } = true;

    /// <summary>
    /// Let the kernel count the loop's sleeps with requests in flight as iowait: an idle loop then shows as up to 100%
    /// iowait on its CPU (top's <c>wa</c>, /proc/stat).
    /// </summary>
    /// <remarks>
    /// Defaults to false: where the kernel has IORING_FEAT_NO_IOWAIT the loop waits with IORING_ENTER_NO_IOWAIT and its
    /// sleep counts as idle (<see cref="EventLoop.SuppressesIoWait"/>; docs/deployment.md, "iowait"). Set true to keep
    /// the kernel's accounting and the cpufreq boost some governors give to tasks in iowait.
    /// </remarks>
    public bool ReportIoWait { get; set; }

    /// <summary>Bytes per block of the loop's <see cref="EventLoop.MemoryPool"/>: a power of two from 4 KiB to 256
    /// KiB.</summary>
    /// <remarks>
    /// Defaults to 16 KiB (a quarter of the segments of 4 KiB blocks in bulk transfers). A connection holding a few
    /// bytes holds whole blocks, so servers of many slow connections may prefer 4 KiB (the Kestrel transport's).
    /// </remarks>
    public int MemoryBlockSize { get; set; } = 16 * 1024;

    /// <summary>Receives exceptions thrown by completion handlers; the loop keeps running.</summary>
    /// <remarks>Defaults to null (the exception is dropped after the owner is told).</remarks>
    public Action<Exception>? UnhandledException { get; set; }

    /// <summary>Name of the loop thread.</summary>
    /// <remarks>Defaults to "io_uring loop".</remarks>
    public string ThreadName { get; set; } = "io_uring loop";

    /// <summary>Test seams (see <see cref="TestHooks"/>); null in production.</summary>
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

    /// <summary>A copy with every setting (test seams included) and another thread name: one per loop of a
    /// network.</summary>
    internal EventLoopOptions WithThreadName(string name)
    {
        var copy = (EventLoopOptions)MemberwiseClone();
        copy.ThreadName = name;
        return copy;
    }
}
