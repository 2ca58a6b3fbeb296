namespace IoUring.Rings;

/// <summary>
/// Every test seam of the library in one place (internal: only the test assemblies set it). A loop gets it through
/// <c>EventLoopOptions.Hooks</c>, a network through its loop options, a bare ring through <see cref="RingOptions.Hooks"/>.
/// Null everywhere in production: each seam is one null check off the hot path.
/// </summary>
internal sealed class TestHooks
{
    /// <summary>Ring setup fails with this errno (EPERM, ENOSYS, ENOMEM) as if the kernel returned it.</summary>
    public int SetupErrno { get; init; }

    /// <summary>Ring setup treats any attempt containing one of these IORING_SETUP_* flags as refused with EINVAL.</summary>
    public uint RefusedSetupFlags { get; init; }

    /// <summary>Fails chosen requests with injected errors, through the real kernel (see <see cref="FaultInjector"/>).</summary>
    public FaultInjector? Faults { get; init; }

    /// <summary>What a network's connections believe the kernel offers (to act as an older kernel), instead of the probe's.</summary>
    public IoUringCapabilities? Capabilities { get; init; }
}
