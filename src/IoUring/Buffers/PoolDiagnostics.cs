using System.Diagnostics;

namespace IoUring.Buffers;

/// <summary>
/// The test suite's watch over the library's pools (the loops' pinned pools, their large-block pools, the receive
/// blocks). Off unless the AppContext switch <see cref="SwitchName"/> is set before the first pool is made (the test
/// assemblies set it in a module initializer): production pays one static readonly check per rent and return, which
/// the JIT folds away. On, each pool keeps a <see cref="BlockLedger"/> that tracks every rent to its return (with the
/// rent's stack), poisons a returned block and checks the poison on its next rent; problems are collected here, and
/// the suite fails a test with them (<see cref="TakeProblems(TimeSpan)"/> after each test).
/// </summary>
internal static class PoolDiagnostics
{
    public const string SwitchName = "IoUring.PoolDiagnostics";

    public static readonly bool Enabled = AppContext.TryGetSwitch(SwitchName, out bool on) && on;

    private static readonly Lock s_lock = new();
    private static readonly List<(BlockLedger Source, string Message)> s_problems = [];
    private static readonly List<(BlockLedger Ledger, long StoppedAt)> s_stopped = [];

    /// <summary>A double return or a write after return (at once), or a leak (once a stopped pool's grace
    /// passed).</summary>
    public static void Report(BlockLedger source, string message)
    {
        lock (s_lock)
        {
            s_problems.Add((source, $"{source.Name}: {message}"));
        }
    }

    /// <summary>A pool stopped with blocks still out: they must come back (connections closing after their loop
    /// stopped still return theirs), or they are leaks.</summary>
    public static void OnStopped(BlockLedger ledger)
    {
        lock (s_lock)
        {
            s_stopped.Add((ledger, Stopwatch.GetTimestamp()));
        }
    }

    /// <summary>
    /// Waits until every stopped pool has all its blocks back, reporting as leaks those still out
    /// <paramref name="grace"/> after their pool stopped, then returns every problem reported so far and forgets them.
    /// </summary>
    public static List<string> TakeProblems(TimeSpan grace) => Take(grace, source: null);

    /// <summary>As <see cref="TakeProblems(TimeSpan)"/>, for one pool's problems only (the tests of this
    /// mechanism).</summary>
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

    /// <summary>Forgets the stopped pools whose blocks are all back or whose grace passed (reporting their leaks);
    /// true when none of those asked about is left.</summary>
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
