using IoUring.Testing;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Rings;

/// <summary>How to set up one ring. Sizes are rounded up to powers of two by the kernel.</summary>
internal sealed class RingOptions
{
    /// <summary>Tried first; on EINVAL flags are dropped one at a time, in <see cref="FallbackOrder"/>.</summary>
    public const uint PreferredFlags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN
        | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_NO_SQARRAY;

    /// <summary>Newest kernel feature first.</summary>
    internal static readonly uint[] FallbackOrder =
    [
        IORING_SETUP_NO_SQARRAY,                                   // 6.6
        IORING_SETUP_DEFER_TASKRUN,                                // 6.1
        IORING_SETUP_SINGLE_ISSUER,                                // 6.0
        IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_COOP_TASKRUN,     // 5.19
        IORING_SETUP_SUBMIT_ALL,                                   // 5.18
        IORING_SETUP_R_DISABLED,                                   // 5.10
    ];

    public uint SqEntries { get; init; } = 256;

    /// <summary>CQ size; 0 means 4 x SQ. Completions beyond it wait in the kernel's overflow list (NODROP).</summary>
    public uint CqEntries { get; init; }

    public uint Flags { get; init; } = PreferredFlags;

    /// <summary>Start disabled; the thread that calls <see cref="Ring.Enable"/> becomes the single issuer.</summary>
    public bool StartDisabled { get; init; }

    /// <summary>Register the ring fd on the creating thread, if the kernel can.</summary>
    public bool RegisterRingFd { get; init; } = true;

    internal TestHooks? Hooks { get; init; }
}
