using IoUring.Rings;

namespace IoUring.Tests.Support;

/// <summary>What tests ask a <see cref="Ring"/> that the library itself never needs.</summary>
internal static class RingExtensions
{
    /// <summary>Free SQEs: the SQ's size minus the SQEs written and not yet consumed by the kernel.</summary>
    public static uint SqSpace(this Ring ring) => ring.SqEntries - ring.PendingSubmissions;
}
