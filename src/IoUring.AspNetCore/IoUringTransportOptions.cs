using IoUring.Loops;
using IoUring.Net;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;

namespace IoUring.AspNetCore;

/// <summary>Options of the io_uring transport for Kestrel.</summary>
/// <remarks>Options shared with <see cref="SocketTransportOptions"/> mean the same, have the same defaults, and also
/// configure the Sockets transport that serves when io_uring is unavailable.</remarks>
public sealed class IoUringTransportOptions
{
    // Defaults live in the plain API's options; this class maps them onto Kestrel's names.
    private static readonly IoUringNetworkOptions s_defaults = new();

    private static readonly Dictionary<string, string> s_namesOfLowerOptions = new()
    {
        [nameof(EventLoopOptions.BufferCount)] = nameof(BufferRingCount),
        [nameof(EventLoopOptions.BufferSize)] = nameof(BufferRingBufferSize),
    };

    /// <summary>Number of event loops: threads, each with its own ring and connections.</summary>
    /// <remarks>Defaults to <see cref="Environment.ProcessorCount"/>.</remarks>
    public int LoopCount { get; set; } = s_defaults.LoopCount;

    /// <summary>The maximum length of the pending connection queue.</summary>
    /// <remarks>Defaults to 512.</remarks>
    public int Backlog { get; set; } = s_defaults.Backlog;

    /// <summary>One multishot ACCEPT per loop (true), or a single-shot ACCEPT per connection.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool MultishotAccept { get; set; } = s_defaults.MultishotAccept;

    /// <summary>Set to false to enable Nagle's algorithm for all connections.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool NoDelay { get; set; } = s_defaults.NoDelay;

    /// <summary>
    /// The maximum unconsumed incoming bytes buffered per connection before it stops receiving.
    /// <see langword="null"/> or 0 disables backpressure (unlimited buffering), a security risk with untrusted clients.
    /// </summary>
    /// <remarks>Defaults to 1 MiB.</remarks>
    public long? MaxReadBufferSize { get; set; } = s_defaults.MaxReadBufferSize;

    /// <summary>
    /// The maximum outgoing bytes buffered per connection before the application's flushes wait.
    /// <see langword="null"/> or 0 disables backpressure (unlimited buffering), a security risk with untrusted clients.
    /// </summary>
    /// <remarks>Defaults to 64 KiB.</remarks>
    public long? MaxWriteBufferSize { get; set; } = s_defaults.MaxWriteBufferSize;

    /// <summary>Run application continuations inline on the event loop thread instead of the thread pool.</summary>
    /// <remarks>Defaults to false. Application code on the loop thread stalls all of that loop's connections while
    /// it runs.</remarks>
    public bool UnsafePreferInlineScheduling { get; set; }

    /// <summary>Sends of at least this many bytes use zero-copy (IORING_OP_SEND_ZC); null disables it.</summary>
    /// <remarks>
    /// Defaults to <see cref="IoUringNetworkOptions.ZeroCopySendThreshold"/>. Needs <see cref="UseLoopMemoryPools"/>.
    /// A connection whose zero-copy sends the kernel copies anyway (loopback) goes back to plain sends. Zero-copy
    /// bytes count against Kestrel's MaxResponseBufferSize until the peer acknowledges them: raise it on links with a
    /// larger bandwidth-delay product.
    /// </remarks>
    public long? ZeroCopySendThreshold { get; set; } = s_defaults.ZeroCopySendThreshold;

    /// <summary>
    /// Give each connection its loop's memory pool (<see cref="EventLoop.MemoryPool"/>, registered with the ring)
    /// instead of Kestrel's, so responses are written straight into memory the kernel sends from.
    /// </summary>
    /// <remarks>
    /// Defaults to true. Takes effect only with a non-null <see cref="ZeroCopySendThreshold"/> on a kernel with
    /// zero-copy send; otherwise Kestrel's pool serves where the host provides one.
    /// </remarks>
    public bool UseLoopMemoryPools { get; set; } = true;

    /// <summary>
    /// Serve <c>IHttpResponseBodyFeature.SendFileAsync</c> (static files, <c>Results.File</c>) by reading the file
    /// on the connection's loop into the response's memory, instead of Kestrel's FileStream copy.
    /// </summary>
    /// <remarks>
    /// Defaults to true. Kestrel still writes headers, frames, encrypts and paces the body; responses of 64 KiB or
    /// less keep Kestrel's copy. The middleware <c>UseIoUring()</c> adds for this costs every request two feature
    /// lookups: an application that sends no files can set this false.
    /// </remarks>
    public bool ReadFilesOnLoops { get; set; } = true;

    /// <summary>Submission queue entries of each loop's ring (a power of two, 2 to 32768).</summary>
    /// <remarks>Defaults to 512. A full queue is submitted early: this bounds batching, not concurrency.</remarks>
    public int SubmissionQueueSize { get; set; } = s_defaults.Loop.SubmissionQueueSize;

    /// <summary>
    /// Completion queue entries of each loop's ring (a power of two, at least <see cref="SubmissionQueueSize"/>, at
    /// most 65536), or 0 for four times <see cref="SubmissionQueueSize"/>.
    /// </summary>
    /// <remarks>Defaults to 0. Completions that do not fit wait in the kernel and are flushed; none is lost.</remarks>
    public int CompletionQueueSize { get; set; }

    /// <summary>Buffers in each loop's provided buffer ring (a power of two, 1 to 32768).</summary>
    /// <remarks>Defaults to 512. Shared by the loop's connections.</remarks>
    public int BufferRingCount { get; set; } = s_defaults.Loop.BufferCount;

    /// <summary>Size in bytes of each buffer of the provided buffer ring (64 bytes to 16 MiB).</summary>
    /// <remarks>Defaults to 8192.</remarks>
    public int BufferRingBufferSize { get; set; } = s_defaults.Loop.BufferSize;

    /// <summary>
    /// Throw when io_uring cannot be used here (old kernel, <c>kernel.io_uring_disabled</c>, a seccomp filter,
    /// RLIMIT_MEMLOCK) instead of serving through Kestrel's Sockets transport.
    /// </summary>
    /// <remarks>Defaults to false: Kestrel serves through Sockets and one warning names the cause.</remarks>
    public bool ThrowIfUnavailable { get; set; }

    /// <summary>
    /// Run the loop threads under SCHED_BATCH: a woken loop waits for the running thread's time slice instead of
    /// preempting it, then handles the whole batch.
    /// </summary>
    /// <remarks>
    /// Defaults to true. Set false if handlers keep every core busy and I/O latency matters more: completions can
    /// wait up to a scheduler time slice.
    /// </remarks>
    public bool BatchScheduling { get; set; } = true;

    /// <summary>Let the kernel count the loops' sleeps as iowait, so an idle server shows up to 100% iowait.</summary>
    /// <remarks>
    /// Defaults to false: from Linux 6.15 the loops' sleeps count as idle (IORING_ENTER_NO_IOWAIT); older kernels
    /// count them as iowait regardless. Set true to keep the kernel's accounting (and governors' iowait boost).
    /// </remarks>
    public bool ReportIoWait { get; set; } = s_defaults.Loop.ReportIoWait;

    // Tests: adjusts the lower layer's options after they are made.
    internal Action<IoUringNetworkOptions>? ConfigureNetworkForTesting { get; set; }

    /// <summary>Checks every option's range.</summary>
    /// <exception cref="ArgumentException">An option is out of range; <see cref="ArgumentException.ParamName"/> names
    /// the first.</exception>
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
                // Kestrel's block size: a connection holding a partial request costs what it does on Sockets.
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
            // Name the option as the user spelled it here.
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
