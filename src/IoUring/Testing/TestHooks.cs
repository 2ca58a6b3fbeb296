using IoUring.Rings;

namespace IoUring.Testing;

/// <summary>Every test seam of the library, set only by the test assemblies; null in production (one null check
/// per seam).</summary>
internal sealed class TestHooks
{
    public int SetupErrno { get; init; }

    /// <summary>Ring setup acts as if on this OS ("Windows", "macOS").</summary>
    public string? OtherOperatingSystem { get; init; }

    /// <summary>Ring setup refuses (EINVAL) these IORING_SETUP_* flags.</summary>
    public uint RefusedSetupFlags { get; init; }

    /// <summary>IORING_FEAT_* bits hidden, as on an older kernel.</summary>
    public uint HiddenFeatures { get; init; }

    public FaultInjector? Faults { get; init; }

    public int BufferRegistrationErrno { get; init; }

    public int BufferUnregistrationErrno { get; init; }

    public bool PoisonReturnedMemory { get; init; }

    /// <summary>How long a loop's stop waits for requests in flight (null: 10 s).</summary>
    public TimeSpan? ShutdownDeadline { get; init; }

    /// <summary>Keep sending zero-copy after a "copied" notification (loopback always copies).</summary>
    public bool IgnoreZeroCopyCopied { get; init; }

    /// <summary>Every send goes through the ring, none from the flushing thread.</summary>
    public bool NoCallerSends { get; init; }

    /// <summary>Runs before a listener makes loop i's acceptor (can hold it while other loops accept).</summary>
    public Action<int>? BeforeAcceptorCreated { get; init; }

    /// <summary>Runs in <c>Input.CopyToAsync(Output)</c> after a cancelled read checked the reader.</summary>
    public Action? AfterCancelledCopyRead { get; init; }

    /// <summary>Runs in the first <c>ConnectionClosed</c> read before it publishes its source.</summary>
    public Action? BeforeClosedTokenSourcePublished { get; init; }

    /// <summary>Runs as a UDP batch receive's completion starts, before the batch stops filling.</summary>
    public Action? BeforeBatchSealed { get; init; }

    /// <summary>Runs in a network's dispose after its loops stopped; what it throws, the dispose throws.</summary>
    public Action? AfterLoopsStopped { get; init; }

    /// <summary>What a network's connections believe the kernel offers.</summary>
    public IoUringCapabilities? Capabilities { get; init; }
}
