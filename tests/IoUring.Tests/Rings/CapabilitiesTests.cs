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

    [Fact]
    public void Zero_copy_features_are_probed_as_this_kernel_has_them()
    {
        // SENDMSG_ZC came in 6.1 and SEND_ZC_REPORT_USAGE (a flag, which the opcode probe cannot see) in 6.2.
        IoUringCapabilities caps = IoUringCapabilities.Current;
        Version kernel = Environment.OSVersion.Version;
        Assert.True(caps.HasZeroCopySend);
        Assert.Equal(kernel >= new Version(6, 1), caps.HasZeroCopySendMsg);
        Assert.Equal(kernel >= new Version(6, 2), caps.HasZeroCopyReportUsage);
    }

    [Fact]
    public void The_flag_probe_tells_a_known_zero_copy_flag_from_an_unknown_one()
    {
        // What the REPORT_USAGE probe relies on: flags are checked before the fd (EINVAL), the fd at issue (EBADF).
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        Assert.False(IoUringCapabilities.ProbeZeroCopyFlag(ring, 1 << 15)); // no such flag on any kernel
        Assert.Equal(Environment.OSVersion.Version >= new Version(6, 2), IoUringCapabilities.ProbeZeroCopyFlag(ring, IORING_SEND_ZC_REPORT_USAGE));
        Assert.True(IoUringCapabilities.ProbeZeroCopyFlag(ring, IORING_RECVSEND_POLL_FIRST)); // a 6.0 flag
    }
}
