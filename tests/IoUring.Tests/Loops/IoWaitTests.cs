using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Support;
using Xunit.Abstractions;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Loops;

/// <summary>
/// What an idle loop's sleep looks like in the CPU accounting of /proc/stat: idle with IORING_ENTER_NO_IOWAIT (6.15+),
/// iowait when the loop keeps the kernel's accounting (<see cref="EventLoopOptions.ReportIoWait"/>) or the kernel lacks
/// the flag (issue #48).
/// </summary>
/// <remarks>Alone in its collection: other tests' rings waiting on the same CPU would add iowait of their own.</remarks>
[Collection(QuietThreadPoolCollection.Name)]
public sealed class IoWaitTests(ITestOutputHelper output)
{
    // Ticks (USER_HZ) of idle plus iowait to collect on the loop's CPU before judging: enough that a few ticks of other
    // processes' iowait cannot tip the share, and reached within a second or so on a CPU that is mostly idle.
    private const long TicksToJudge = 100;

    [Theory]
    [InlineData(false, false)] // the default
    [InlineData(true, false)]  // ReportIoWait: the kernel's accounting kept
    [InlineData(false, true)]  // a kernel without IORING_FEAT_NO_IOWAIT (before 6.15)
    public async Task An_idle_loop_with_a_receive_in_flight_shows_as_iowait_only_where_asked_or_unavoidable(
        bool reportIoWait, bool hideFeature)
    {
        bool kernelHasIt = IoUringCapabilities.Current.HasNoIoWait;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop = new EventLoopOptions
            {
                ReportIoWait = reportIoWait,
                Hooks = hideFeature ? new TestHooks { HiddenFeatures = IORING_FEAT_NO_IOWAIT } : null,
            },
        });
        EventLoop loop = network.Loops[0];
        bool expectSuppressed = kernelHasIt && !reportIoWait && !hideFeature;
        Assert.Equal(expectSuppressed, loop.SuppressesIoWait);

        // A connection whose multishot receive waits: a request in flight, which is what makes the kernel count a wait
        // as iowait (besides the listener's accept and the loop's own eventfd read).
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
        using Socket _ = client;
        await using IoUringConnection __ = server;

        int cpu = await PinLoopThreadAsync(loop);
        string state = $"kernel {KernelFeatures.Release}, FEAT_NO_IOWAIT {kernelHasIt}, ReportIoWait {reportIoWait}, " +
            $"hidden {hideFeature}: loop suppresses iowait {loop.SuppressesIoWait}";
        // Other processes' threads sleeping in iowait on the same CPU (a build, another ring) can only add iowait, never
        // take the loop's away: so a window where the loop's CPU shows little iowait proves the loop adds none, and the
        // suppressed case gets a few windows to find one. Without the flag every window shows ~100%.
        var windows = new List<string>();
        double share = double.NaN;
        for (int window = 0; window < (expectSuppressed ? 5 : 1); window++)
        {
            CpuTicks spent = MeasureIdleShare(cpu, out CpuTicks otherCpus);
            share = spent.IoWaitShare;
            windows.Add($"cpu{cpu} over {spent.Total} ticks: idle {spent.Idle}, iowait {spent.IoWait} ({share:P0} of idle " +
                $"+ iowait); the other CPUs: idle {otherCpus.Idle}, iowait {otherCpus.IoWait}");
            output.WriteLine($"{state}; {windows[^1]}");
            if (share < 0.2)
            {
                break;
            }
        }

        if (!kernelHasIt)
        {
            // Before 6.15 nothing the loop passes changes the accounting: the numbers above are for the record.
            return;
        }
        if (expectSuppressed)
        {
            Assert.True(share < 0.2, $"an idle loop waiting with NO_IOWAIT showed iowait in every window: {string.Join(" | ", windows)}");
        }
        else
        {
            Assert.True(share > 0.5, $"an idle loop keeping the kernel's accounting showed only {share:P0} iowait ({windows[0]})");
        }
    }

    /// <summary>Pins the loop thread to the allowed CPU that is most idle right now; returns that CPU.</summary>
    private static async Task<int> PinLoopThreadAsync(EventLoop loop)
    {
        int[] allowed = AllowedCpus();
        Dictionary<int, CpuTicks> before = ReadCpuTicks();
        await Task.Delay(200);
        Dictionary<int, CpuTicks> after = ReadCpuTicks();
        int cpu = allowed.MaxBy(c => after[c].Idle + after[c].IoWait - before[c].Idle - before[c].IoWait);

        var pinned = new TaskCompletionSource<int>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(_ =>
        {
            pinned.SetResult(PinCallingThread(cpu));
        }, null);
        Assert.Equal(0, await pinned.Task.WaitAsync(TimeSpan.FromSeconds(10)));
        // The loop is asleep again before the sampling starts (a hang guard, not a timing goal).
        await Task.Delay(100);
        return cpu;
    }

    /// <summary>Samples /proc/stat until <paramref name="cpu"/> has been idle or in iowait for
    /// <see cref="TicksToJudge"/> ticks (at most 60 s: other processes may keep it busy), and returns the ticks of each
    /// kind it spent meanwhile.</summary>
    private static CpuTicks MeasureIdleShare(int cpu, out CpuTicks otherCpus)
    {
        Dictionary<int, CpuTicks> start = ReadCpuTicks();
        CpuTicks spent = default;
        Dictionary<int, CpuTicks> now = start;
        for (int i = 0; i < 600 && spent.Idle + spent.IoWait < TicksToJudge; i++)
        {
            Thread.Sleep(100);
            now = ReadCpuTicks();
            spent = now[cpu] - start[cpu];
        }
        otherCpus = now.Keys.Where(c => c != cpu).Aggregate(default(CpuTicks), (sum, c) => sum + (now[c] - start[c]));
        Assert.True(spent.Idle + spent.IoWait >= TicksToJudge,
            $"cpu{cpu} was idle for only {spent.Idle + spent.IoWait} of {spent.Total} ticks: too busy to measure");
        return spent;
    }

    /// <summary>Pins the calling thread to <paramref name="cpu"/>; returns 0 or the errno.</summary>
    private static unsafe int PinCallingThread(int cpu)
    {
        ulong mask = 1UL << cpu;
        // pid 0: the calling thread only, not the process.
        return sched_setaffinity(0, sizeof(ulong), &mask) == 0 ? 0 : Marshal.GetLastPInvokeError();
    }

    private static unsafe int[] AllowedCpus()
    {
        ulong mask = 0;
        Assert.Equal(0, sched_getaffinity(0, sizeof(ulong), &mask));
        ulong allowed = mask;
        return Enumerable.Range(0, 64).Where(c => (allowed & (1UL << c)) != 0).ToArray();
    }

    /// <summary>Each CPU's line of /proc/stat: "cpuN user nice system idle iowait irq softirq steal ...".</summary>
    private static Dictionary<int, CpuTicks> ReadCpuTicks()
    {
        var ticks = new Dictionary<int, CpuTicks>();
        foreach (string line in File.ReadLines("/proc/stat"))
        {
            if (line.Length > 3 && line.StartsWith("cpu", StringComparison.Ordinal) && char.IsAsciiDigit(line[3]))
            {
                long[] f = line.Split(' ', StringSplitOptions.RemoveEmptyEntries).Skip(1)
                    .Select(v => long.Parse(v, CultureInfo.InvariantCulture)).ToArray();
                ticks[int.Parse(line.AsSpan(3, line.IndexOf(' ') - 3), CultureInfo.InvariantCulture)] =
                    new CpuTicks(f[3], f[4], f.Take(8).Sum());
            }
        }
        return ticks;
    }

    private readonly record struct CpuTicks(long Idle, long IoWait, long Total)
    {
        public double IoWaitShare => Idle + IoWait == 0 ? 0 : (double)IoWait / (Idle + IoWait);

        public static CpuTicks operator -(CpuTicks a, CpuTicks b) => new(a.Idle - b.Idle, a.IoWait - b.IoWait, a.Total - b.Total);

        public static CpuTicks operator +(CpuTicks a, CpuTicks b) => new(a.Idle + b.Idle, a.IoWait + b.IoWait, a.Total + b.Total);
    }

    [DllImport("libc", SetLastError = true)]
    private static extern unsafe int sched_setaffinity(int pid, nint cpusetsize, ulong* mask);

    [DllImport("libc", SetLastError = true)]
    private static extern unsafe int sched_getaffinity(int pid, nint cpusetsize, ulong* mask);
}
