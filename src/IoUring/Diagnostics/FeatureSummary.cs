using System.Globalization;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Diagnostics;

/// <summary>
/// One line naming what a network's loops and connections use, each feature "on" or "off (reason)", for a start log a
/// user can paste into an issue (<see cref="IoUringNetwork.DescribeFeatures"/>). Layers above may add or restate
/// features.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class FeatureSummary
{
    private readonly List<(string Name, string State)> _features = [];
    private readonly string _head;

    private FeatureSummary(string head) => _head = head;

    internal static string KernelRelease { get; } = ReadKernelRelease();

    /// <summary>"kernel 6.1 lacks it: 6.15+" (no parentheses: the reason stands in them).</summary>
    internal static string KernelLacks(string since)
    {
        Version v = Environment.OSVersion.Version;
        return $"kernel {v.Major}.{v.Minor} lacks it: {since}+";
    }

    public void On(string name, string? detail = null) => Set(name, detail is null ? "on" : $"on ({detail})");

    public void Off(string name, string reason) => Set(name, $"off ({reason})");

    private void Set(string name, string state)
    {
        int index = _features.FindIndex(f => f.Name == name);
        if (index >= 0)
        {
            _features[index] = (name, state);
        }
        else
        {
            _features.Add((name, state));
        }
    }

    public override string ToString()
        => string.Join("; ", _features.Select(f => $"{f.Name} {f.State}").Prepend(_head));

    /// <summary>The first loop stands for all: they share options and kernel.</summary>
    public static FeatureSummary For(IoUringNetwork network)
    {
        EventLoop loop = network.Loops[0];
        EventLoopOptions loopOptions = loop.Options;
        ConnectionSettings settings = network.Settings;
        IoUringCapabilities caps = settings.Capabilities;
        var summary = new FeatureSummary(string.Create(CultureInfo.InvariantCulture,
            $"kernel {KernelRelease}, {network.Loops.Count} {(network.Loops.Count == 1 ? "loop" : "loops")}"));
        uint setup = loop.SetupFlags;

        OnIf(summary, "DEFER_TASKRUN", (setup & IORING_SETUP_DEFER_TASKRUN) != 0, KernelLacks("6.1"));
        OnIf(summary, "NO_SQARRAY", (setup & IORING_SETUP_NO_SQARRAY) != 0, KernelLacks("6.6"));
        OnIf(summary, "registered ring fd", loop.IsRingFdRegistered,
            loopOptions.RegisterRingFd ? KernelLacks("5.18") : "option RegisterRingFd");
        summary.On("buffer ring", string.Create(CultureInfo.InvariantCulture,
            $"{loopOptions.BufferCount} x {loopOptions.BufferSize} B per loop"));

        // As ConnectionReceiver decides: a backpressure limit without the cap means single-shot RECVs (no bundles).
        bool singleShot = settings.MaxReadBufferSize is > 0 && !caps.HasReceiveLimit;
        OnIf(summary, "multishot receive byte cap", caps.HasReceiveLimit,
            KernelLacks("6.17") + (singleShot ? "; single-shot receives instead" : ""));
        OnIf(summary, "receive bundles", caps.HasReceiveBundles && !singleShot,
            !caps.HasReceiveBundles ? KernelLacks("6.15") : "single-shot receives");

        // As ConnectionSender decides (for TCP: Unix domain sockets never send zero-copy).
        bool loopPools = settings.MemoryPool is null or PinnedBlockMemoryPool;
        if (settings.ZeroCopySendThreshold is <= 0 or long.MaxValue)
        {
            summary.Off("zero-copy sends", "option ZeroCopySendThreshold");
        }
        else if (!caps.HasZeroCopySend)
        {
            summary.Off("zero-copy sends", KernelLacks("6.0"));
        }
        else if (!loopPools)
        {
            summary.Off("zero-copy sends", "the pipes use another memory pool than the loops'");
        }
        else
        {
            string reports = caps.HasZeroCopyReportUsage ? "" : "; copies unreported before 6.2";
            summary.On("zero-copy sends", string.Create(CultureInfo.InvariantCulture,
                $"from {settings.ZeroCopySendThreshold} B{reports}"));
        }
        if (settings.MemoryPool is null)
        {
            summary.On("registered send buffers", string.Create(CultureInfo.InvariantCulture,
                $"the loops' pools of {loopOptions.MemoryBlockSize / 1024} KiB blocks, registered as they grow; " +
                $"gather sends from them {(caps.HasZeroCopySendMsgFixed ? "too" : "only from 6.15")}"));
        }
        else
        {
            summary.Off("registered send buffers", "the pipes use another memory pool than the loops'");
        }

        OnIf(summary, "NO_IOWAIT", loop.SuppressesIoWait,
            loopOptions.ReportIoWait ? "option ReportIoWait" : KernelLacks("6.15"));
        if (loop.IsBatchScheduled)
        {
            summary.On("SCHED_BATCH");
        }
        else
        {
            summary.Off("SCHED_BATCH", loopOptions.BatchScheduling
                ? string.Create(CultureInfo.InvariantCulture, $"refused with errno {loop.BatchSchedulingError}")
                : "option BatchScheduling");
        }
        return summary;
    }

    private static void OnIf(FeatureSummary summary, string name, bool on, string reasonIfOff)
    {
        if (on)
        {
            summary.On(name);
        }
        else
        {
            summary.Off(name, reasonIfOff);
        }
    }

    private static string ReadKernelRelease()
    {
        try
        {
            return File.ReadAllText("/proc/sys/kernel/osrelease").Trim();
        }
        catch (IOException)
        {
            return Environment.OSVersion.Version.ToString();
        }
        catch (UnauthorizedAccessException)
        {
            return Environment.OSVersion.Version.ToString();
        }
    }
}
