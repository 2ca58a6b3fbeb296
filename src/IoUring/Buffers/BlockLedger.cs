using System.Diagnostics;

namespace IoUring.Buffers;

/// <summary>
/// One pool's record of its blocks under <see cref="PoolDiagnostics"/>: which are out and where each was rented. A
/// returned block is poisoned and checked at its next rent (catching a write after return, the kernel's too).
/// </summary>
/// <remarks>A block is named by an object and an offset. Problems are reported outside this ledger's lock
/// (<see cref="PoolDiagnostics"/> takes it under its own).</remarks>
internal sealed class BlockLedger(string name, byte poison, string? origin = null)
{
    private readonly Dictionary<(object, int), Entry> _entries = [];
    private bool _stopped;

    /// <summary>The pool's kind and where it was made (for a loop's pool, the test that made the loop).</summary>
    public string Name { get; } = $"{name} (made at {origin ?? Format(new StackTrace(2, false))})";

    public byte Poison { get; } = poison;

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

    /// <summary>Checks the poison a return left and records the rent's stack.</summary>
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

    /// <summary>Poisons the block; false for a double return (reported; the pool must not take it again).</summary>
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

    /// <summary>Moves a rent to the block a connection takes from the receive ring, from the spare put in its
    /// place.</summary>
    public void OnExchanged(object given, int givenOffset, object taken, int takenOffset)
    {
        lock (_entries)
        {
            _entries[(given, givenOffset)] = new Entry(false, null);
            _entries[(taken, takenOffset)] = new Entry(true, new StackTrace(1, false));
        }
    }

    /// <summary>A block the pool dropped for good (trimmed).</summary>
    public void Forget(object block, int offset)
    {
        lock (_entries)
        {
            _entries.Remove((block, offset));
        }
    }

    /// <summary>Blocks held past the pool's stop on purpose (the kernel may still read them) are not
    /// leaks.</summary>
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

    public void Report(string problem)
    {
        Debug.Assert(!Monitor.IsEntered(_entries), "problems are reported outside the ledger's lock");
        PoolDiagnostics.Report(this, $"{problem}, at {Format(new StackTrace(1, false))}");
    }

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

    /// <summary>One line per rent stack of the blocks still out.</summary>
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

    /// <summary>A stack's innermost frames, without the test runner's.</summary>
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
    /// <param name="Kept">See <see cref="KeepOutstanding"/>.</param>
    private sealed record Entry(bool Out, StackTrace? Rent, bool Kept = false);
}
