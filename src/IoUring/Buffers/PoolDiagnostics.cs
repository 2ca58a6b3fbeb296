using System.Diagnostics;

namespace IoUring.Buffers;

/// <summary>
/// The test suite's watch over the library's pools, on when the AppContext switch <see cref="SwitchName"/> is set
/// before the first pool is made (off, it costs a static readonly check the JIT folds away). Each pool then keeps a
/// <see cref="BlockLedger"/>; the suite fails a test with <see cref="TakeProblems(TimeSpan)"/>.
/// </summary>
internal static class PoolDiagnostics
{
    public const string SwitchName = "IoUring.PoolDiagnostics";

    public static readonly bool Enabled = AppContext.TryGetSwitch(SwitchName, out bool on) && on;

    private static readonly Lock s_lock = new();
    private static readonly List<(BlockLedger Source, string Message)> s_problems = [];
    private static readonly List<(BlockLedger Ledger, long StoppedAt)> s_stopped = [];

    public static void Report(BlockLedger source, string message)
    {
        lock (s_lock)
        {
            s_problems.Add((source, $"{source.Name}: {message}"));
        }
    }

    /// <summary>A pool stopped with blocks out: they must come back within the grace, or they are leaks.</summary>
    public static void OnStopped(BlockLedger ledger)
    {
        lock (s_lock)
        {
            s_stopped.Add((ledger, Stopwatch.GetTimestamp()));
        }
    }

    /// <summary>Waits until every stopped pool has its blocks back or <paramref name="grace"/> passed (then they are
    /// leaks), and takes every problem reported so far.</summary>
    public static List<string> TakeProblems(TimeSpan grace) => Take(grace, source: null);

    /// <summary>As <see cref="TakeProblems(TimeSpan)"/>, for one pool only.</summary>
    public static List<string> TakeProblems(BlockLedger source, TimeSpan grace) => Take(grace, source);

    private static List<string> Take(TimeSpan grace, BlockLedger? source)
    {
        while (!SettleStopped(grace, source))
        {
            Thread.Sleep(10);
        }
        lock (s_lock)
        {
            var taken = new List<string>();
            s_problems.RemoveAll(p =>
            {
                bool take = source is null || p.Source == source;
                if (take)
                {
                    taken.Add(p.Message);
                }
                return take;
            });
            return taken;
        }
    }

    /// <summary>Forgets the stopped pools settled (all back, or leaks reported); true when none asked about is
    /// left.</summary>
    private static bool SettleStopped(TimeSpan grace, BlockLedger? source)
    {
        lock (s_lock)
        {
            for (int i = s_stopped.Count - 1; i >= 0; i--)
            {
                (BlockLedger ledger, long stoppedAt) = s_stopped[i];
                if (source is not null && ledger != source)
                {
                    continue;
                }
                if (ledger.OutstandingCount == 0)
                {
                    s_stopped.RemoveAt(i);
                }
                else if (Stopwatch.GetElapsedTime(stoppedAt) >= grace)
                {
                    s_stopped.RemoveAt(i);
                    foreach (string leak in ledger.DescribeOutstanding())
                    {
                        s_problems.Add((ledger, $"{ledger.Name}: {leak}"));
                    }
                }
            }
            return !s_stopped.Exists(s => source is null || s.Ledger == source);
        }
    }
}
