using System.Diagnostics;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net.Udp;

/// <summary>The test namespaces themselves: a test process killed mid-test leaves its namespaces behind (Dispose
/// never ran); the next test run removes them.</summary>
public sealed class VethNamespacesTests
{
    [Fact]
    public void Namespaces_left_by_a_process_that_is_gone_are_removed_and_a_live_ones_kept()
    {
        using Process gone = Process.Start(new ProcessStartInfo("true"))!;
        gone.WaitForExit();
        string left = $"iou-a-{gone.Id}-1";
        string live = $"iou-b-{Environment.ProcessId}-999999";
        VethNamespaces.Ip($"netns add {left}");
        VethNamespaces.Ip($"netns add {live}");
        try
        {
            using (new VethNamespaces(mtu: 1500))
            {
                Assert.False(File.Exists($"/run/netns/{left}"), $"{left} of a process that is gone is still there");
                Assert.True(File.Exists($"/run/netns/{live}"), $"{live} of this live process was removed");
            }
        }
        finally
        {
            VethNamespaces.Ip($"netns del {left}", mayFail: true);
            VethNamespaces.Ip($"netns del {live}", mayFail: true);
        }
    }
}
