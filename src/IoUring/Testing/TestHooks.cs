using IoUring.Rings;

namespace IoUring.Testing;

/// <summary>
/// Every test seam of the library in one place (internal: only the test assemblies set it). A loop gets it through
/// <c>EventLoopOptions.Hooks</c>, a network through its loop options, a bare ring through
/// <see cref="RingOptions.Hooks"/>. Null everywhere in production: each seam is one null check off the hot path.
/// </summary>
internal sealed class TestHooks
{
    /// <summary>Ring setup fails with this errno (EPERM, ENOSYS, ENOMEM) as if the kernel returned it.</summary>
    public int SetupErrno { get; init; }

    /// <summary>Ring setup acts as if the process ran on this operating system ("Windows", "macOS") instead of
    /// Linux.</summary>
    public string? OtherOperatingSystem { get; init; }

    /// <summary>Ring setup treats any attempt containing one of these IORING_SETUP_* flags as refused with
    /// EINVAL.</summary>
    public uint RefusedSetupFlags { get; init; }

    /// <summary>Ring setup reports the kernel's IORING_FEAT_* bits without these, as an older kernel would.</summary>
    public uint HiddenFeatures { get; init; }

    /// <summary>Fails chosen requests with injected errors, through the real kernel, or refuses owners' SQEs (see
    /// <see cref="FaultInjector"/>). The loop keeps it in a field: one null check per SQE when unset.</summary>
    public FaultInjector? Faults { get; init; }

    /// <summary>Registering memory with the ring (fixed buffers) fails with this errno (ENOMEM: RLIMIT_MEMLOCK) as if
    /// the kernel refused.</summary>
    public int BufferRegistrationErrno { get; init; }

    /// <summary>Emptying a registered buffer's entry fails with this errno as if the kernel refused (the entry stays
    /// taken).</summary>
    public int BufferUnregistrationErrno { get; init; }

    /// <summary>The loop's memory pool fills every returned block with a poison byte, so bytes sent after a block's
    /// return show up.</summary>
    public bool PoisonReturnedMemory { get; init; }

    /// <summary>How long a loop's stop waits for the requests in flight before it leaves them (10 s when
    /// null).</summary>
    public TimeSpan? ShutdownDeadline { get; init; }

    /// <summary>Connections keep sending zero-copy after a notification said the kernel copied (loopback always
    /// copies), to test zero-copy lifetimes here.</summary>
    public bool IgnoreZeroCopyCopied { get; init; }

    /// <summary>Connections never send from the flushing thread: every send goes through the ring, as before caller
    /// sends.</summary>
    public bool NoCallerSends { get; init; }

    /// <summary>Called on the thread making a listener just before it makes loop i's acceptor (to hold it there while
    /// loops already started accept).</summary>
    public Action<int>? BeforeAcceptorCreated { get; init; }

    /// <summary>Called by a connection's <c>Input.CopyToAsync(Output)</c> when a read returned cancelled, after it
    /// checked whether the reader was completed (to complete it there).</summary>
    public Action? AfterCancelledCopyRead { get; init; }

    /// <summary>Called by a connection's first <c>ConnectionClosed</c> read after it saw the connection open, before it
    /// publishes the token source it made (to close the connection there).</summary>
    public Action? BeforeClosedTokenSourcePublished { get; init; }

    /// <summary>Called on the thread pool as a UDP batch receive's completion runs, before it stops the batch filling
    /// (to hold it there while the loop delivers more).</summary>
    public Action? BeforeBatchSealed { get; init; }

    /// <summary>Called by a network's dispose once its loops stopped; what it throws, the dispose throws as a loop's
    /// failed stop.</summary>
    public Action? AfterLoopsStopped { get; init; }

    /// <summary>What a network's connections believe the kernel offers (to act as an older kernel), instead of the
    /// probe's.</summary>
    public IoUringCapabilities? Capabilities { get; init; }
}
