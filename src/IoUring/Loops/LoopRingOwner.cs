using System.Runtime.Versioning;

namespace IoUring.Loops;

/// <summary>The loop's own requests: the wakeup eventfd's READ and the stop's cancel-all.</summary>
[SupportedOSPlatform("linux")]
internal sealed class LoopRingOwner(EventLoop loop) : RingOwner(loop)
{
    public const uint KindWakeup = 1;
    public const uint KindCancel = 2;

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        if (kind == KindWakeup && !Loop.IsStopping)
        {
            Loop.ArmWakeup();
        }
    }
}
