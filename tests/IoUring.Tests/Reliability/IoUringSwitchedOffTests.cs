using IoUring.Interop;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Support;

namespace IoUring.Tests.Reliability;

/// <summary>
/// io_uring switched off or refused (sysctl kernel.io_uring_disabled, a seccomp filter, RLIMIT_MEMLOCK), simulated by
/// the setup errno hook: every layer names the cause and leaks nothing. The same with a real seccomp filter on a real
/// process, and the Kestrel transport's fallback: IoUring.AspNetCore.Tests' IoUringSwitchedOffTests. Off Linux (the
/// operating system hook): every way in throws naming the OS before any native call.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed class IoUringSwitchedOffTests
{
    [Theory]
    [InlineData(Errno.EPERM, "disabled by sysctl")]
    [InlineData(Errno.ENOSYS, "disabled by sysctl")]
    [InlineData(Errno.ENOMEM, "RLIMIT_MEMLOCK")]
    public void Setup_failures_name_the_cause(int errno, string expected)
    {
        var ex = Assert.Throws<IoUringUnavailableException>(() => Ring.Create(new RingOptions { Hooks = new() { SetupErrno = errno } }));
        Assert.Equal(errno, ex.Errno);
        Assert.Contains("io_uring unavailable", ex.Message, StringComparison.Ordinal);
        Assert.Contains(expected, ex.Message, StringComparison.Ordinal);
    }

    [Fact]
    public void A_disabled_io_uring_is_reported_with_its_cause_instead_of_thrown()
    {
        IoUringCapabilities caps = IoUringCapabilities.Probe(new RingOptions { SqEntries = 8, Hooks = new() { SetupErrno = Errno.EPERM } });
        Assert.False(caps.IsSupported);
        Assert.Contains("kernel.io_uring_disabled", caps.UnavailableReason, StringComparison.Ordinal);
        var ex = Assert.Throws<IoUringUnavailableException>(caps.EnsureSupported);
        Assert.Equal(Errno.EPERM, ex.Errno);
    }

    [Fact]
    public void With_io_uring_switched_off_the_plain_api_throws_naming_the_cause_and_leaks_nothing()
    {
        int fdsBefore = FdCount.Owned();
        var ex = Assert.Throws<IoUringUnavailableException>(() => new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, Loop = { Hooks = new() { SetupErrno = Errno.EPERM } } }));
        Assert.Contains("kernel.io_uring_disabled", ex.Message, StringComparison.Ordinal);
        Assert.Equal(Errno.EPERM, ex.Errno);
        Assert.Equal(fdsBefore, FdCount.Owned());
    }

    [Fact]
    public void Off_Linux_the_plain_api_throws_naming_the_OS_before_any_native_call()
    {
        var windows = new TestHooks { OtherOperatingSystem = "Windows" };

        var ex = Assert.Throws<IoUringUnavailableException>(() => new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, Loop = { Hooks = windows } }));
        Assert.Equal("io_uring needs Linux; this is Windows.", ex.Message);
        Assert.Equal(Errno.ENOSYS, ex.Errno);
        Assert.Equal(ex.Message, Assert.Throws<IoUringUnavailableException>(() => new EventLoop(new EventLoopOptions { Hooks = windows })).Message);
        IoUringCapabilities caps = IoUringCapabilities.Probe(new RingOptions { SqEntries = 8, Hooks = windows });
        Assert.False(caps.IsSupported);
        Assert.Equal(ex.Message, caps.UnavailableReason);
        // That no native call was made is observed in a process of its own: IoUring.AspNetCore.Tests'
        // IoUringSwitchedOffTests.Off_Linux_neither_the_plain_api_nor_Kestrel_makes_an_io_uring_system_call.
    }
}
