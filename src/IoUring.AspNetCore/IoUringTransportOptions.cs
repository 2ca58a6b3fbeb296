using IoUring.Loops;
using IoUring.Net;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;

namespace IoUring.AspNetCore;

/// <summary>Options of the io_uring transport for Kestrel.</summary>
/// <remarks>
/// The options shared with <see cref="SocketTransportOptions"/> mean the same and have the same defaults; they also
/// configure the Sockets transport that serves instead when io_uring is unavailable.
/// </remarks>
public sealed class IoUringTransportOptions
{
    // One home for each default: the plain API's options. This class only maps them onto Kestrel's names and types.
    private static readonly IoUringNetworkOptions s_defaults = new();

    // The lower layer's option names that differ from this class's.
    private static readonly Dictionary<string, string> s_namesOfLowerOptions = new()
    {
        [nameof(EventLoopOptions.BufferCount)] = nameof(BufferRingCount),
        [nameof(EventLoopOptions.BufferSize)] = nameof(BufferRingBufferSize),
    };

    /// <summary>Number of event loops: threads, each with its own ring, accepting and serving its own
    /// connections.</summary>
    /// <remarks>Defaults to <see cref="Environment.ProcessorCount"/>.</remarks>
    public int LoopCount { get; set; } = s_defaults.LoopCount;

    /// <summary>The maximum length of the pending connection queue.</summary>
    /// <remarks>Defaults to 512 pending connections.</remarks>
    public int Backlog { get; set; } = s_defaults.Backlog;

    /// <summary>
    /// Accept with one multishot ACCEPT per loop (true), or with a single-shot ACCEPT re-armed after each connection
    /// (false).
    /// </summary>
    /// <remarks>Defaults to true. Single-shot is there to compare the two; it costs one more request per
    /// connection.</remarks>
    public bool MultishotAccept { get; set; } = s_defaults.MultishotAccept;

    /// <summary>Set to false to enable Nagle's algorithm for all connections.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool NoDelay { get; set; } = s_defaults.NoDelay;

    /// <summary>
    /// The maximum unconsumed incoming bytes the transport buffers per connection; past it the connection stops
    /// receiving until the application catches up.
    /// <para>A value of <see langword="null"/> or 0 disables backpressure entirely, allowing unlimited buffering:
    /// a security risk given untrusted clients.</para>
    /// </summary>
    /// <remarks>Defaults to 1 MiB.</remarks>
    public long? MaxReadBufferSize { get; set; } = s_defaults.MaxReadBufferSize;

    /// <summary>
    /// The maximum outgoing bytes the transport buffers per connection before the application's flushes wait.
    /// <para>A value of <see langword="null"/> or 0 disables backpressure entirely, allowing unlimited buffering:
    /// a security risk given untrusted clients.</para>
    /// </summary>
    /// <remarks>Defaults to 64 KiB.</remarks>
    public long? MaxWriteBufferSize { get; set; } = s_defaults.MaxWriteBufferSize;

    /// <summary>
    /// Run application continuations inline on the event loop thread instead of dispatching them to the thread pool.
    /// </summary>
    /// <remarks>
    /// Defaults to false. Application code then runs on the loop thread and blocks every connection of that loop
    /// while it runs, which is why this is unsafe. Measure before turning it on.
    /// </remarks>
    public bool UnsafePreferInlineScheduling { get; set; }

    /// <summary>
    /// Sends of at least this many bytes use zero-copy (IORING_OP_SEND_ZC), or null never to use it. A connection whose
    /// zero-copy send the kernel reports as copied anyway (always so on loopback) goes back to plain sends.
    /// </summary>
    /// <remarks>
    /// Defaults to the plain API's default (<see cref="IoUringNetworkOptions.ZeroCopySendThreshold"/>). Zero-copy needs
    /// memory that outlives the pipe until the kernel's notification: the loops' own pools (see
    /// <see cref="UseLoopMemoryPools"/>); with Kestrel's pool, sends are plain. Bytes sent zero-copy count against
    /// Kestrel's MaxResponseBufferSize until their notification (once the peer acknowledged them), so a slow reader
    /// holds no more than on copying sends; on links whose bandwidth-delay product exceeds that limit, raise it.
    /// </remarks>
    public long? ZeroCopySendThreshold { get; set; } = s_defaults.ZeroCopySendThreshold;

    /// <summary>
    /// Give each connection its loop's memory pool (<see cref="EventLoop.MemoryPool"/>: pinned regions registered with
    /// the loop's ring as fixed buffers) instead of Kestrel's (IMemoryPoolFactory), so that Kestrel writes responses
    /// straight into memory the kernel can send without pinning or copying it.
    /// </summary>
    /// <remarks>
    /// Defaults to true. The loops' pools are used when this is true, <see cref="ZeroCopySendThreshold"/> is not null
    /// and the kernel has zero-copy send; otherwise the pipes use Kestrel's pool where the host provides one (and every
    /// send copies), else still the loops' pools. On loopback the kernel always copies: from 6.2 (REPORT_USAGE) a
    /// connection's first large send tells it so and it goes back to plain sends (its memory stays the loop's pool,
    /// which costs nothing extra); on 6.0 and 6.1 it cannot know and stays zero-copy, correct but slower there.
    /// </remarks>
    public bool UseLoopMemoryPools { get; set; } = true;

    /// <summary>
    /// Serve <c>IHttpResponseBodyFeature.SendFileAsync</c> (static files, <c>Results.File</c>, range requests) by
    /// reading the file on the connection's loop (io_uring READ) straight into the response's memory, instead of
    /// Kestrel's FileStream copy on the thread pool.
    /// </summary>
    /// <remarks>
    /// Defaults to true. Kestrel still writes the headers, frames (HTTP/2), encrypts (TLS) and paces the body; only
    /// where the bytes come from changes. A middleware added by <c>UseIoUring()</c> (an IStartupFilter, first in the
    /// pipeline) does it, for io_uring connections only. A response of one read or less (64 KiB, known before the file
    /// is opened) stays with Kestrel's copy: through the loop it measured slower. The middleware costs every request
    /// two feature lookups and a set, about 1% of the CPU of a pipelined "hello world" (docs/benchmarks.md): an
    /// application that sends no files can set this false to save it.
    /// </remarks>
    public bool ReadFilesOnLoops { get; set; } = true;

    /// <summary>Submission queue entries of each loop's ring (a power of two, 2 to 32768).</summary>
    /// <remarks>Defaults to 512. A full queue is submitted early, so this bounds batching, not concurrency.</remarks>
    public int SubmissionQueueSize { get; set; } = s_defaults.Loop.SubmissionQueueSize;

    /// <summary>
    /// Completion queue entries of each loop's ring (a power of two, at least <see cref="SubmissionQueueSize"/>, at
    /// most 65536), or 0 for four times <see cref="SubmissionQueueSize"/>.
    /// </summary>
    /// <remarks>Defaults to 0. Completions that do not fit wait in the kernel and are flushed; none is lost.</remarks>
    public int CompletionQueueSize { get; set; }

    /// <summary>Buffers in each loop's provided buffer ring (a power of two, 1 to 32768).</summary>
    /// <remarks>
    /// Defaults to 512. Every connection of a loop receives into these and gives them back at once, so this bounds
    /// the bytes one loop takes from the kernel per iteration, not per connection.
    /// </remarks>
    public int BufferRingCount { get; set; } = s_defaults.Loop.BufferCount;

    /// <summary>Size in bytes of each buffer of the provided buffer ring (64 bytes to 16 MiB).</summary>
    /// <remarks>Defaults to 8192.</remarks>
    public int BufferRingBufferSize { get; set; } = s_defaults.Loop.BufferSize;

    /// <summary>
    /// Throw when io_uring cannot be used here (old kernel, <c>kernel.io_uring_disabled</c>, a seccomp filter,
    /// RLIMIT_MEMLOCK) instead of serving through Kestrel's Sockets transport.
    /// </summary>
    /// <remarks>
    /// Defaults to false: Kestrel keeps serving through the Sockets transport and one warning names the cause.
    /// </remarks>
    public bool ThrowIfUnavailable { get; set; }

    /// <summary>
    /// Run the loop threads under Linux's SCHED_BATCH policy: a loop woken by new completions waits for the running
    /// request thread to block or finish its time slice instead of preempting it, then handles the whole batch.
    /// </summary>
    /// <remarks>
    /// Defaults to true: fewer preempting wake-ups, more requests per CPU-second (docs/benchmarks.md, "Kestrel"). Set
    /// false if request handlers run CPU-bound on every core for long stretches
    /// and I/O latency matters more than CPU: completions can then wait up to a scheduler time slice.
    /// </remarks>
    public bool BatchScheduling { get; set; } = true;

    /// <summary>
    /// Let the kernel count the loops' sleeps as iowait: an idle server then shows up to 100% iowait on its loops'
    /// CPUs (top's <c>wa</c>, /proc/stat, node exporter's <c>mode="iowait"</c>) although it waits for the network, not
    /// for storage.
    /// </summary>
    /// <remarks>
    /// Defaults to false: on Linux 6.15 and later the loops wait with IORING_ENTER_NO_IOWAIT and their sleep counts as
    /// idle. Older kernels count it as iowait whatever this says (docs/deployment.md, "iowait"). Set true to keep the
    /// kernel's accounting (and the CPU frequency boost some governors give to tasks in iowait).
    /// </remarks>
    public bool ReportIoWait { get; set; } = s_defaults.Loop.ReportIoWait;

    /// <summary>Tests: adjusts the lower layer's options (its internal test seams, e.g. a setup errno) after they are
    /// made.</summary>
    internal Action<IoUringNetworkOptions>? ConfigureNetworkForTesting { get; set; }

    /// <summary>Throws <see cref="ArgumentException"/> naming the first invalid option.</summary>
    /// <exception cref="ArgumentException">An option is out of range; <see cref="ArgumentException.ParamName"/> names
    /// it.</exception>
    public void Validate() => ToNetworkOptions().Validate();

    internal IoUringNetworkOptions ToNetworkOptions(Action<Exception>? unhandledException = null)
    {
        var options = new IoUringNetworkOptions
        {
            LoopCount = LoopCount,
            Backlog = Backlog,
            NoDelay = NoDelay,
            MultishotAccept = MultishotAccept,
            // 0 means "no limit" to the Sockets transport; the lower layer spells that null.
            MaxReadBufferSize = MaxReadBufferSize == 0 ? null : MaxReadBufferSize,
            MaxWriteBufferSize = MaxWriteBufferSize == 0 ? null : MaxWriteBufferSize,
            UnsafePreferInlineScheduling = UnsafePreferInlineScheduling,
            ZeroCopySendThreshold = ZeroCopySendThreshold,
            // Kestrel's switch for FIN instead of RST on abort, honoured as the Sockets transport honours it.
            AbortWithReset = !(AppContext.TryGetSwitch(
                "Microsoft.AspNetCore.Server.Kestrel.FinOnError", out bool finOnError) && finOnError),
            Loop = new EventLoopOptions
            {
                SubmissionQueueSize = SubmissionQueueSize,
                CompletionQueueSize = CompletionQueueSize,
                BufferCount = BufferRingCount,
                BufferSize = BufferRingBufferSize,
                ThreadName = "io_uring kestrel",
                // Kestrel's own pool's block size: a connection holding a partial request (Kestrel keeps two blocks
                // then) costs what it costs on the Sockets transport, not four times that.
                MemoryBlockSize = 4096,
                BatchScheduling = BatchScheduling,
                ReportIoWait = ReportIoWait,
                UnhandledException = unhandledException,
            },
        };
        ConfigureNetworkForTesting?.Invoke(options);
        try
        {
            options.Validate();
        }
        catch (ArgumentException e)
            when (e.ParamName is { } name && s_namesOfLowerOptions.TryGetValue(name, out string? ours))
        {
            // The checks live with the lower layer's options; the message names the option the user set here.
            throw new ArgumentException(e.Message.Replace($" (Parameter '{name}')", "").Replace(name, ours), ours);
        }
        return options;
    }

    internal void CopyTo(SocketTransportOptions sockets)
    {
        sockets.Backlog = Backlog;
        sockets.NoDelay = NoDelay;
        sockets.MaxReadBufferSize = MaxReadBufferSize;
        sockets.MaxWriteBufferSize = MaxWriteBufferSize;
        sockets.UnsafePreferInlineScheduling = UnsafePreferInlineScheduling;
    }
}
