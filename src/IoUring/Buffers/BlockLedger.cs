using System.Diagnostics;

namespace IoUring.Buffers;

/// <summary>
/// One pool's record of its blocks under <see cref="PoolDiagnostics"/> (test mode only): which are out and where each
/// was rented. A returned block is filled with the pool's poison byte and checked on its next rent, so a write after
/// return (the program's or the kernel's) is caught; a return of a block that is not out is caught at once; blocks
/// still out when the pool stopped are leaks unless they come back within the suite's grace.
/// </summary>
/// <remarks>A block is named by an object and an offset (a pinned block, or a receive block's array and offset).
/// Problems are reported outside this ledger's lock (<see cref="PoolDiagnostics"/> takes it under its own).</remarks>
internal sealed class BlockLedger(string name, byte poison, string? origin = null)
{
    private readonly Dictionary<(object, int), Entry> _entries = [];
    private bool _stopped;

    /// <summary>The pool's kind and where it was made (a loop's pool: where the loop was made, which names the
    /// test).</summary>
    public string Name { get; } = $"{name} (made at {origin ?? Format(new StackTrace(2, false))})";

    public byte Poison { get; } = poison;

    /// <summary>Blocks rented and not yet returned.</summary>
    public int OutstandingCount
    {
        get
        {
            lock (_entries)
            {
                return _entries.Values.Count(e => e.Out && !e.Kept);
            }
        }
    }

    /// <summary>A block leaves the pool: checks the poison a return left in it (unless the pool never handed it out
    /// before) and records where it goes.</summary>
    public void OnRent(object block, int offset, ReadOnlySpan<byte> memory)
    {
        var rent = new StackTrace(1, false);
        string? problem = null;
        lock (_entries)
        {
            if (_entries.TryGetValue((block, offset), out Entry? entry))
            {
                if (entry.Out)
                {
                    problem = $"a block was handed out while still rented (returned twice?); rented before at "
                        + $"{Format(entry.Rent)}";
                }
                else if (memory.IndexOfAnyExcept(Poison) is int at and >= 0)
                {
                    problem = $"a block was written after its return (byte {at} of {memory.Length} is "
                        + $"0x{memory[at]:X2}, not the poison 0x{Poison:X2}); its last renter rented it at "
                        + $"{Format(entry.Rent)}";
                }
            }
            _entries[(block, offset)] = new Entry(true, rent);
        }
        if (problem is not null)
        {
            PoolDiagnostics.Report(this, problem);
        }
    }

    /// <summary>A block comes back: a block that is not out is a double return (reported, and false: the pool must
    /// not take it again); otherwise it is poisoned.</summary>
    public bool OnReturn(object block, int offset, Span<byte> memory)
    {
        string? problem = null;
        lock (_entries)
        {
            if (_entries.TryGetValue((block, offset), out Entry? entry) && entry.Out)
            {
                memory.Fill(Poison);
                _entries[(block, offset)] = entry with { Out = false, Kept = false };
            }
            else
            {
                problem = $"a block was returned twice, the second time at {Format(new StackTrace(1, false))}"
                    + (entry is null ? "" : $"; it was rented at {Format(entry.Rent)}");
            }
        }
        if (problem is not null)
        {
            PoolDiagnostics.Report(this, problem);
            return false;
        }
        return true;
    }

    /// <summary>Moves a rent from one block to another (a spare put into the receive ring in place of the block a
    /// connection takes: the ring's blocks are not out, the taken one is).</summary>
    public void OnExchanged(object given, int givenOffset, object taken, int takenOffset)
    {
        lock (_entries)
        {
            _entries[(given, givenOffset)] = new Entry(false, null);
            _entries[(taken, takenOffset)] = new Entry(true, new StackTrace(1, false));
        }
    }

    /// <summary>A block the pool dropped for good (trimmed): nothing to check on it any more.</summary>
    public void Forget(object block, int offset)
    {
        lock (_entries)
        {
            _entries.Remove((block, offset));
        }
    }

    /// <summary>Marks the blocks out that <paramref name="keptByDesign"/> picks as held past the pool's stop on
    /// purpose (memory the kernel may still read): not leaks, and their return is no double return.</summary>
    public void KeepOutstanding(Func<object, bool> keptByDesign)
    {
        lock (_entries)
        {
            foreach (KeyValuePair<(object, int), Entry> e in _entries.Where(e => e.Value.Out).ToList())
            {
                if (keptByDesign(e.Key.Item1))
                {
                    _entries[e.Key] = e.Value with { Kept = true };
                }
            }
        }
    }

    /// <summary>Reports a problem of the pool itself (e.g. a block released more often than it was held).</summary>
    public void Report(string problem)
    {
        Debug.Assert(!Monitor.IsEntered(_entries), "problems are reported outside the ledger's lock");
        PoolDiagnostics.Report(this, $"{problem}, at {Format(new StackTrace(1, false))}");
    }

    /// <summary>The pool stopped: what is still out must come back (see <see cref="PoolDiagnostics"/>).</summary>
    public void OnStopped()
    {
        lock (_entries)
        {
            if (_stopped || !_entries.Values.Any(e => e.Out && !e.Kept))
            {
                _stopped = true;
                return;
            }
            _stopped = true;
        }
        Debug.Assert(!Monitor.IsEntered(_entries), "a stopped ledger is reported outside its lock");
        PoolDiagnostics.OnStopped(this);
    }

    /// <summary>One line per place that rented blocks still out, with its stack.</summary>
    public List<string> DescribeOutstanding()
    {
        lock (_entries)
        {
            return _entries.Values.Where(e => e.Out && !e.Kept)
                .GroupBy(e => Format(e.Rent))
                .Select(g => $"{g.Count()} block(s) never returned after the pool stopped; rented at {g.Key}")
                .ToList();
        }
    }

    /// <summary>A stack's innermost frames: where a block was rented or misused, without the test runner's
    /// frames below.</summary>
    public static string Format(StackTrace? stack)
    {
        if (stack is null)
        {
            return "(unknown)";
        }
        string[] lines = stack.ToString().Split(Environment.NewLine, StringSplitOptions.RemoveEmptyEntries);
        return string.Join(Environment.NewLine, lines.Take(MaxFrames))
            + (lines.Length > MaxFrames ? $"{Environment.NewLine}   ({lines.Length - MaxFrames} more frames)" : "");
    }

    private const int MaxFrames = 30;

    /// <param name="Out">Rented and not yet returned.</param>
    /// <param name="Rent">The last rent's stack.</param>
    /// <param name="Kept">Out past the pool's stop on purpose (see <see cref="KeepOutstanding"/>).</param>
    private sealed record Entry(bool Out, StackTrace? Rent, bool Kept = false);
}
