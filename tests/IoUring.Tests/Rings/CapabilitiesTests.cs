using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Rings;

public sealed class CapabilitiesTests
{
    [Fact]
    public void This_kernel_supports_everything_the_library_requires()
    {
        IoUringCapabilities caps = IoUringCapabilities.Current;
        Assert.True(caps.IsSupported, caps.UnavailableReason);
        caps.EnsureSupported();
        Assert.True(caps.HasBufferRing);
        Assert.True(caps.HasRegisteredRingFd);
        Assert.True(caps.HasDeferTaskRun);
        Assert.True(caps.OpcodeCount > IORING_OP_SEND_ZC);
        foreach (byte op in new[] { IORING_OP_NOP, IORING_OP_ACCEPT, IORING_OP_RECV, IORING_OP_SEND, IORING_OP_SENDMSG, IORING_OP_CONNECT, IORING_OP_CLOSE, IORING_OP_SHUTDOWN, IORING_OP_ASYNC_CANCEL, IORING_OP_SEND_ZC })
        {
            Assert.True(caps.IsOpcodeSupported(op), $"opcode {op} not reported");
        }
        Assert.False(caps.IsOpcodeSupported(255));
    }

    [Fact]
    public void A_disabled_io_uring_is_reported_with_its_cause_instead_of_thrown()
    {
        IoUringCapabilities caps = IoUringCapabilities.Probe(new RingOptions { SqEntries = 8, SetupErrnoForTesting = Interop.Errno.EPERM });
        Assert.False(caps.IsSupported);
        Assert.Contains("kernel.io_uring_disabled", caps.UnavailableReason, StringComparison.Ordinal);
        var ex = Assert.Throws<IoUringUnavailableException>(caps.EnsureSupported);
        Assert.Equal(Interop.Errno.EPERM, ex.Errno);
    }
}
