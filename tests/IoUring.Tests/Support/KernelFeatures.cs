using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Support;

/// <summary>
/// What the running kernel offers, for tests whose own expectations depend on it (tests/kernels/run.sh runs the suite
/// on older kernels). The library itself must cope with every kernel from 6.0 on; only test seams and "on this kernel"
/// expectations consult this.
/// </summary>
internal static unsafe class KernelFeatures
{
    /// <summary>The kernel's release as a version (6.1.0-56-amd64 → 6.1).</summary>
    public static Version Release { get; } = ParseRelease(File.ReadAllText("/proc/sys/kernel/osrelease"));

    public static bool AtLeast(int major, int minor) => Release >= new Version(major, minor);

    /// <summary>This kernel, or this kernel acting as one without the multishot receive cap (before 6.17: single-shot
    /// RECVs of Input's room, vectored RECVMSGs after a receive that left bytes). On a kernel that lacks the cap both are
    /// the cap-less path.</summary>
    public static IoUringCapabilities WithReceiveCap(bool receiveCap)
        => receiveCap ? IoUringCapabilities.Current : IoUringCapabilities.Current.WithoutReceiveLimitForTesting();

    private static readonly Lazy<bool> s_nopInjectResult = new(ProbeNopInjectResult);

    /// <summary>
    /// IORING_NOP_INJECT_RESULT (a NOP completing with sqe->len): the fault-injection seam
    /// (TestHooks.Faults) is built on it. Kernels without it (6.1) complete such a NOP with -EINVAL,
    /// so every injected fault would be EINVAL instead of the errno the test chose.
    /// </summary>
    public static bool NopInjectResult => s_nopInjectResult.Value;

    private static bool ProbeNopInjectResult()
    {
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 4 });
        io_uring_sqe* sqe = ring.TryGetSqe();
        sqe->opcode = IORING_OP_NOP;
        sqe->nop_flags = IORING_NOP_INJECT_RESULT;
        sqe->len = unchecked((uint)-Errno.ECONNRESET);
        sqe->user_data = 1;
        ring.SubmitAndWait(1);
        ring.ReadyCompletions(out uint head);
        int result = ring.CqeAt(head)->res;
        ring.AdvanceCq(1);
        return result == -Errno.ECONNRESET;
    }

    private static Version ParseRelease(string release)
    {
        string[] parts = release.Trim().Split('.', '-', '+');
        return new Version(int.Parse(parts[0]), int.Parse(parts[1]));
    }
}

/// <summary>A fact that needs IORING_NOP_INJECT_RESULT (the fault-injection seam); skipped, with the reason, on kernels without it.</summary>
public sealed class NopInjectFactAttribute : FactAttribute
{
    public NopInjectFactAttribute()
    {
        if (!KernelFeatures.NopInjectResult)
        {
            Skip = $"kernel {KernelFeatures.Release} has no IORING_NOP_INJECT_RESULT (a NOP with nop_flags completes with EINVAL), which fault injection needs";
        }
    }
}

/// <summary>As <see cref="NopInjectFactAttribute"/>, for a theory.</summary>
public sealed class NopInjectTheoryAttribute : TheoryAttribute
{
    public NopInjectTheoryAttribute()
    {
        if (!KernelFeatures.NopInjectResult)
        {
            Skip = $"kernel {KernelFeatures.Release} has no IORING_NOP_INJECT_RESULT (a NOP with nop_flags completes with EINVAL), which fault injection needs";
        }
    }
}
