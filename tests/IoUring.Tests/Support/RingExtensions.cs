using IoUring.Interop;
using IoUring.Rings;

namespace IoUring.Tests.Support;

/// <summary>What tests ask a <see cref="Ring"/> that the library itself never needs.</summary>
internal static class RingExtensions
{
    /// <summary>Free SQEs: the SQ's size minus the SQEs written and not yet consumed by the kernel.</summary>
    public static uint SqSpace(this Ring ring) => ring.SqEntries - ring.PendingSubmissions;

    /// <summary>
    /// Submits what is queued and waits until at least <paramref name="count"/> completions are ready. A wait ends
    /// early with -EINTR whenever a signal reaches this thread (the runtime's SIGCHLD when any child process of the
    /// test host exits, for one), so a single <see cref="Ring.Enter"/> is not a wait for a completion: wait again.
    /// </summary>
    public static unsafe void SubmitAndWait(this Ring ring, uint count)
    {
        while (true)
        {
            uint ready = ring.ReadyCompletions(out _);
            if (ready >= count && ring.PendingSubmissions == 0)
            {
                return;
            }
            int result = ring.Enter(ready >= count ? 0 : count - ready);
            Xunit.Assert.True(result >= 0 || result == -Errno.EINTR, $"io_uring_enter failed: {result}");
        }
    }
}
