using System.Diagnostics;
using System.Globalization;
using IoUring.Benchmarks.Support;

namespace IoUring.Benchmarks.Net;

/// <summary>One measured window of the process under test (a sender or a receiver of the bulk UDP stream).</summary>
internal readonly record struct BulkSample(
    double BytesPerCpuSecond, double DatagramsPerSecond, double CpuShare, double? Delivered,
    long PeakRss, long? Allocated, long? Heap, long? Jitted);

/// <summary>
/// What <see cref="UdpBulkSend"/> and <see cref="UdpBulkReceive"/> share: the children of a row (.NET, or the C
/// program benchmarks/c/udp_bulk for the "c-" rows), the warm-up past the JIT's tiers, the window and the table.
/// </summary>
internal static class UdpBulkHarness
{
    // Tier 1 takes a method 30 calls after a delay of 100 ms, ten times that in a process pinned to one CPU
    // (TC_DelaySingleProcMultiplier), which every new tier-0 compilation restarts; tiered PGO adds an instrumented
    // tier before it, and a loop running in a tier-0 method goes to OSR code. No fixed time is known to be enough on a
    // busy CPU, so the warm-up lasts until the JIT has been about idle for a few seconds: at most QuietMethods compiled
    // over the last QuietPolls polls, not none, as the polls' own code (Console's) tiers up as they go on.
    private static readonly TimeSpan MinimumWarmUp = TimeSpan.FromSeconds(5);
    private static readonly TimeSpan PollInterval = TimeSpan.FromSeconds(1);
    private const int QuietPolls = 3, QuietMethods = 2;
    private static readonly TimeSpan MaximumWarmUp = TimeSpan.FromSeconds(60);
    // After "go", before a window: the sender back at full speed and the receiver's queue as it is under the stream.
    private static readonly TimeSpan Settle = TimeSpan.FromMilliseconds(500);

    /// <summary>The arguments <c>[rounds] [seconds] [sizes]</c> of both benchmarks.</summary>
    public static (int Rounds, int Seconds, int[] Sizes) ParseArguments(string[] args, int defaultRounds)
    {
        int Arg(int index, int fallback)
            => args.Length > index ? int.Parse(args[index], CultureInfo.InvariantCulture) : fallback;
        int[] sizes = args.Length > 2
            ? args[2].Split(',').Select(s => int.Parse(s, CultureInfo.InvariantCulture)).ToArray()
            : [1200, 1450];
        return (Arg(0, defaultRounds), Arg(1, 3), sizes);
    }

    /// <summary>
    /// The rows that can run: those of <paramref name="kinds"/> not starting with "c-", and those that do if
    /// benchmarks/c/udp_bulk builds (make rebuilds it when its source changed); otherwise a line says why they are
    /// skipped. Returns the program's path, or null.
    /// </summary>
    public static string? BuildCProgram(ref string[] kinds)
    {
        try
        {
            return CPrograms.Make("udp_bulk", "gcc (apt-get install build-essential)");
        }
        catch (Exception ex) when (ex is InvalidOperationException or DirectoryNotFoundException)
        {
            Console.WriteLine($"skipping {string.Join(", ", kinds.Where(IsC))}: {ex.Message}");
            kinds = [.. kinds.Where(kind => !IsC(kind))];
            return null;
        }
    }

    /// <summary>
    /// Starts the child of one row on CPU 0 (inside network namespace <paramref name="netns"/> unless null): for
    /// "c-MODE", <paramref name="cProgram"/> <paramref name="cVerb"/> MODE ARGS; otherwise this program's <paramref
    /// name="option"/> KIND ARGS.
    /// </summary>
    public static Child StartRow(
        string kind, string option, string? cProgram, string cVerb, string? netns, params string[] args)
        => IsC(kind)
            ? Child.StartProgramIn(netns, 0, cProgram!, [cVerb, kind["c-".Length..], .. args])
            : Child.StartIn(netns, 0, [option, kind, .. args]);

    /// <summary>
    /// Lets the children run until their code is tiered up: at least <see cref="MinimumWarmUp"/>, then until the .NET
    /// ones together compiled at most <see cref="QuietMethods"/> methods over <see cref="QuietPolls"/> polls; at most
    /// <see cref="MaximumWarmUp"/> (the table's "jitted" column shows what was compiled inside the windows).
    /// </summary>
    public static void WarmUp(params Child[] children)
    {
        var clock = Stopwatch.StartNew();
        var jitted = new List<long>();
        while (true)
        {
            Thread.Sleep(PollInterval);
            jitted.Add(children.Sum(child => child.Count().Jitted ?? 0));
            bool quiet = jitted.Count > QuietPolls && jitted[^1] - jitted[^(QuietPolls + 1)] <= QuietMethods;
            if (clock.Elapsed >= MaximumWarmUp || (clock.Elapsed >= MinimumWarmUp && quiet))
            {
                return;
            }
        }
    }

    /// <summary>
    /// A window of a sender the harness keeps paused between its windows: "go", <see cref="Settle"/>, the window
    /// (<see cref="Measure"/>) of <paramref name="measured"/> (the sender itself, or the receiver it sends to),
    /// "pause".
    /// </summary>
    public static BulkSample Window(Child sender, Child measured, int size, int seconds, Child? receiver = null)
    {
        sender.Count("go");
        Thread.Sleep(Settle);
        BulkSample sample = Measure(measured, size, seconds, receiver);
        sender.Count("pause");
        return sample;
    }

    /// <summary>
    /// One window of <paramref name="seconds"/>: the bytes <paramref name="measured"/> counted over its CPU time
    /// (utime + stime from /proc, read right after each of its answers) and, given the <paramref name="receiver"/> of a
    /// sender, the share of the sent bytes it received.
    /// </summary>
    private static BulkSample Measure(Child measured, int size, int seconds, Child? receiver = null)
    {
        ChildCounters before = measured.Count();
        TimeSpan cpuBefore = measured.CpuTime();
        long startTicks = Stopwatch.GetTimestamp();
        long receivedBefore = receiver?.Count().Bytes ?? 0;
        Thread.Sleep(TimeSpan.FromSeconds(seconds));
        ChildCounters after = measured.Count();
        TimeSpan cpu = measured.CpuTime() - cpuBefore;
        TimeSpan wall = Stopwatch.GetElapsedTime(startTicks);
        long? received = receiver?.Count().Bytes - receivedBefore;
        long bytes = after.Bytes - before.Bytes;
        return new BulkSample(bytes / cpu.TotalSeconds, bytes / wall.TotalSeconds / size, cpu / wall,
            (double?)received / bytes, measured.PeakRss(), after.Allocated - before.Allocated, after.Heap,
            after.Jitted - before.Jitted);
    }

    /// <summary>Prints the column names of <see cref="PrintRows"/>.</summary>
    public static void PrintHeader(string role) => Console.WriteLine(
        $" size  {role,-13} MB/CPU-s  ratio (min-max)    datagrams/s   CPU  delivered   peak RSS  allocated" +
        "    GC heap  jitted");

    /// <summary>
    /// One row per kind: medians over the rounds, the ratio to the first kind (System.Net.Sockets) per round; peak RSS
    /// and the GC heap at the window's end, the bytes allocated inside it (with the few hundred bytes of the child's
    /// own answer to the harness) and the methods compiled inside it (the most of any window); "-" where a C child has
    /// nothing to tell.
    /// </summary>
    public static void PrintRows(int size, string[] kinds, List<BulkSample>[] samples)
    {
        for (int k = 0; k < kinds.Length; k++)
        {
            List<BulkSample> rows = samples[k];
            double[] ratios = [.. rows.Zip(samples[0], (a, b) => a.BytesPerCpuSecond / b.BytesPerCpuSecond)];
            double? delivered = rows[0].Delivered is null ? null : Median(rows.Select(r => r.Delivered!.Value));
            string jitted = rows[0].Jitted is null
                ? "-"
                : rows.Max(r => r.Jitted!.Value).ToString(CultureInfo.InvariantCulture);
            double? Bytes(Func<BulkSample, long?> field)
                => field(rows[0]) is null ? null : Median(rows.Select(r => (double)field(r)!.Value));
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"{size,5}  {kinds[k],-13} {Median(rows.Select(r => r.BytesPerCpuSecond)) / 1e6,8:F1}  " +
                $"{Median(ratios),4:F2} ({ratios.Min():F2}-{ratios.Max():F2})  " +
                $"{Median(rows.Select(r => r.DatagramsPerSecond)),12:N0}" +
                $"  {Percent(Median(rows.Select(r => r.CpuShare))),5}" +
                $"  {Percent(delivered),9}" +
                $"  {Mebibytes(Median(rows.Select(r => (double)r.PeakRss))),9}" +
                $"  {Mebibytes(Bytes(r => r.Allocated)),9}  {Mebibytes(Bytes(r => r.Heap)),9}" +
                $"  {jitted,6}"));
        }
    }

    private static bool IsC(string kind) => kind.StartsWith("c-", StringComparison.Ordinal);

    private static double Median(IEnumerable<double> values) => UdpResponder.Median(values);

    private static string Percent(double? share)
        => share is { } s ? string.Create(CultureInfo.InvariantCulture, $"{s * 100:F0}%") : "-";

    private static string Mebibytes(double? bytes) => bytes switch
    {
        null => "-",
        < 1024 * 1024 => string.Create(CultureInfo.InvariantCulture, $"{bytes / 1024:F1} KiB"),
        _ => string.Create(CultureInfo.InvariantCulture, $"{bytes / (1024 * 1024):F1} MiB"),
    };
}
