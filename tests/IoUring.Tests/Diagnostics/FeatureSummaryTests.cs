using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Diagnostics;

/// <summary><see cref="IoUringNetwork.DescribeFeatures"/>: each feature on, or off with the reason that applies (an
/// older kernel acted out through the test hooks, an option).</summary>
public sealed class FeatureSummaryTests
{
    private static readonly string s_kernel = $"{Environment.OSVersion.Version.Major}.{Environment.OSVersion.Version.Minor}";

    [Fact]
    public async Task Features_an_older_kernel_lacks_are_off_naming_the_kernel_and_the_release_that_has_them()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop = new EventLoopOptions
            {
                Hooks = new TestHooks
                {
                    HiddenFeatures = IORING_FEAT_NO_IOWAIT,
                    RefusedSetupFlags = IORING_SETUP_NO_SQARRAY,
                    Capabilities = IoUringCapabilities.Current.WithoutReceiveLimitForTesting().WithoutReceiveBundlesForTesting(),
                },
            },
        });

        string line = network.DescribeFeatures();

        Assert.Contains($"; NO_IOWAIT off (kernel {s_kernel} lacks it: 6.15+)", line);
        Assert.Contains($"; NO_SQARRAY off (kernel {s_kernel} lacks it: 6.6+)", line);
        Assert.Contains($"; multishot receive byte cap off (kernel {s_kernel} lacks it: 6.17+; single-shot receives instead)", line);
        Assert.Contains($"; receive bundles off (kernel {s_kernel} lacks it: 6.15+)", line);
        Assert.Contains("; DEFER_TASKRUN on", line);
    }

    [Fact]
    public async Task Features_options_turn_off_name_the_option()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            ZeroCopySendThreshold = null,
            Loop = new EventLoopOptions { RegisterRingFd = false, ReportIoWait = true, BatchScheduling = false },
        });

        string line = network.DescribeFeatures();

        Assert.StartsWith("kernel ", line);
        Assert.Contains(", 1 loop; ", line);
        Assert.Contains("; registered ring fd off (option RegisterRingFd)", line);
        Assert.Contains("; zero-copy sends off (option ZeroCopySendThreshold)", line);
        Assert.Contains("; NO_IOWAIT off (option ReportIoWait)", line);
        Assert.Contains("; SCHED_BATCH off (option BatchScheduling)", line);
    }
}
