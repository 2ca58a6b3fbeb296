using System.Diagnostics;
using System.Globalization;

namespace IoUring.Benchmarks.Support;

/// <summary>
/// Side-by-side measurement of two variants in one process, interleaved: each round times the baseline and the
/// candidate back to back (alternating which goes first) and takes their ratio, and the median of those ratios is
/// reported. On a shared, noisy machine this resolves differences of a few percent that separate BenchmarkDotNet
/// processes, run one after the other, cannot (docs/benchmarks.md).
/// </summary>
internal static class PairedRunner
{
    private static readonly TimeSpan s_sliceTarget = TimeSpan.FromMilliseconds(20);

    /// <summary>Times <paramref name="rounds"/> interleaved rounds after <paramref name="warmup"/> (1 s by default) of both.</summary>
    public static void Run(string name, int operationsPerInvoke, Action baseline, Action candidate, int rounds, TimeSpan? warmup = null)
    {
        Warm(baseline, candidate, warmup ?? TimeSpan.FromSeconds(1));
        int invocations = Calibrate(baseline, operationsPerInvoke);

        var baselineNs = new double[rounds];
        var candidateNs = new double[rounds];
        var ratios = new double[rounds];
        long allocatedBefore = GC.GetTotalAllocatedBytes(precise: true);
        for (int round = 0; round < rounds; round++)
        {
            if (round % 2 == 0)
            {
                baselineNs[round] = Time(baseline, invocations, operationsPerInvoke);
                candidateNs[round] = Time(candidate, invocations, operationsPerInvoke);
            }
            else
            {
                candidateNs[round] = Time(candidate, invocations, operationsPerInvoke);
                baselineNs[round] = Time(baseline, invocations, operationsPerInvoke);
            }
            ratios[round] = candidateNs[round] / baselineNs[round];
        }
        long allocated = GC.GetTotalAllocatedBytes(precise: true) - allocatedBefore;
        double bytesPerOperation = (double)allocated / (2L * rounds * invocations * operationsPerInvoke);

        Array.Sort(ratios);
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"| {name} | {Median(baselineNs):F1} | {Median(candidateNs):F1} | {Median(ratios):F3} | " +
            $"{Percentile(ratios, 0.25):F3} .. {Percentile(ratios, 0.75):F3} | {rounds} x {invocations * operationsPerInvoke} | {bytesPerOperation:F3} |"));
    }

    public static void PrintHeader()
    {
        Console.WriteLine("| pair (candidate vs baseline) | baseline ns/op (median) | candidate ns/op (median) | ratio (median of rounds) | ratio IQR | rounds x ops per side | allocated B/op |");
        Console.WriteLine("|---|---:|---:|---:|---|---|---:|");
    }

    private static void Warm(Action baseline, Action candidate, TimeSpan duration)
    {
        // Long enough for tiered compilation to promote both paths to optimized code.
        var watch = Stopwatch.StartNew();
        while (watch.Elapsed < duration)
        {
            baseline();
            candidate();
        }
    }

    private static int Calibrate(Action action, int operationsPerInvoke)
    {
        int invocations = 1;
        while (true)
        {
            long start = Stopwatch.GetTimestamp();
            for (int i = 0; i < invocations; i++)
            {
                action();
            }
            if (Stopwatch.GetElapsedTime(start) >= s_sliceTarget || invocations >= 1 << 24)
            {
                return invocations;
            }
            invocations *= 2;
        }
    }

    private static double Time(Action action, int invocations, int operationsPerInvoke)
    {
        long start = Stopwatch.GetTimestamp();
        for (int i = 0; i < invocations; i++)
        {
            action();
        }
        return Stopwatch.GetElapsedTime(start).TotalNanoseconds / ((double)invocations * operationsPerInvoke);
    }

    private static double Median(double[] values)
    {
        var sorted = (double[])values.Clone();
        Array.Sort(sorted);
        return Percentile(sorted, 0.5);
    }

    private static double Percentile(double[] sorted, double p)
    {
        double index = p * (sorted.Length - 1);
        int low = (int)Math.Floor(index);
        int high = (int)Math.Ceiling(index);
        return sorted[low] + ((sorted[high] - sorted[low]) * (index - low));
    }
}
