using IoUring.Rings;

namespace IoUring.Testing;

/// <summary>
/// Every test seam of the library, set only by the test assemblies (<c>EventLoopOptions.Hooks</c>,
/// <see cref="RingOptions.Hooks"/>). Null in production: each seam is one null check off the hot path.
/// </summary>
internal sealed class TestHooks
{
    /// <summary>Ring setup fails with this errno.</summary>
    public int SetupErrno { get; init; }

    /// <summary>Ring setup acts as if on this operating system ("Windows", "macOS").</summary>
    public string? OtherOperatingSystem { get; init; }

    /// <summary>Ring setup refuses (EINVAL) any attempt with one of these IORING_SETUP_* flags.</summary>
    public uint RefusedSetupFlags { get; init; }

    /// <summary>Ring setup hides these IORING_FEAT_* bits, as an older kernel would.</summary>
    public uint HiddenFeatures { get; init; }

    /// <summary>Injected request failures and refused SQEs (one null check per SQE when unset).</summary>
    public FaultInjector? Faults { get; init; }

    /// <summary>Registering fixed buffers fails with this errno (ENOMEM: RLIMIT_MEMLOCK).</summary>
    public int BufferRegistrationErrno { get; init; }

    /// <summary>Emptying a registered buffer's entry fails with this errno (the entry stays taken).</summary>
    public int BufferUnregistrationErrno { get; init; }

    /// <summary>The loop's memory pool poisons returned blocks, so sends after a return show.</summary>
    public bool PoisonReturnedMemory { get; init; }

    /// <summary>How long a loop's stop waits for requests in flight (10 s when null).</summary>
    public TimeSpan? ShutdownDeadline { get; init; }

    /// <summary>Keep sending zero-copy after a "copied" notification (loopback always copies).</summary>
    public bool IgnoreZeroCopyCopied { get; init; }

    /// <summary>Every send goes through the ring, none from the flushing thread.</summary>
    public bool NoCallerSends { get; init; }

    /// <summary>Runs before a listener makes loop i's acceptor (holds it while other loops accept).</summary>
    public Action<int>? BeforeAcceptorCreated { get; init; }

    /// <summary>Runs in <c>Input.CopyToAsync(Output)</c> after a cancelled read checked the reader.</summary>
    public Action? AfterCancelledCopyRead { get; init; }

    /// <summary>Runs in the first <c>ConnectionClosed</c> read before it publishes its source.</summary>
    public Action? BeforeClosedTokenSourcePublished { get; init; }

    /// <summary>Runs as a UDP batch receive's completion starts, before the batch stops filling.</summary>
    public Action? BeforeBatchSealed { get; init; }

    /// <summary>Runs in a network's dispose after its loops stopped; what it throws, the dispose throws.</summary>
    public Action? AfterLoopsStopped { get; init; }

    /// <summary>What a network's connections believe the kernel offers, instead of the probe's.</summary>
    public IoUringCapabilities? Capabilities { get; init; }
}
