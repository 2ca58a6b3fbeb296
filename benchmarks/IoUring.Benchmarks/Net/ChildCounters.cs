using System.Globalization;
using System.Runtime;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// What a bulk UDP child answers each stdin line with, as "count bytes N allocated N jitted N heap N" (all since the
/// process began, so the harness takes differences over a window): the bytes it sent or received; a .NET child adds
/// the bytes its threads allocated (<see cref="GC.GetTotalAllocatedBytes(bool)"/>, precise), the methods the JIT
/// compiled (<see cref="JitInfo.GetCompiledMethodCount(bool)"/>: tier-0, OSR and tier-1 compilations alike, so a window
/// in which it grows ran code that was still tiering up) and the GC heap (<see cref="GC.GetTotalMemory(bool)"/>). A C
/// child (benchmarks/c/udp_bulk) answers only the bytes.
/// </summary>
internal sealed record ChildCounters(long Bytes, long? Allocated, long? Jitted, long? Heap)
{
    public static ChildCounters Parse(string line)
    {
        string[] words = line.Split(' ', StringSplitOptions.RemoveEmptyEntries);
        long? Field(string name)
        {
            int at = Array.IndexOf(words, name);
            return at >= 0 && at + 1 < words.Length ? long.Parse(words[at + 1], CultureInfo.InvariantCulture) : null;
        }
        return new ChildCounters(
            Field("bytes") ?? throw new FormatException($"no bytes in '{line}'"),
            Field("allocated"), Field("jitted"), Field("heap"));
    }

    /// <summary>
    /// In a .NET child: answers each stdin line with this process's counters, until stdin ends; a line "pause" or "go"
    /// is first given to <paramref name="pause"/> (true: stop sending; a sender's harness keeps it between windows).
    /// </summary>
    public static void AnswerUntilStdinEnds(Func<long> bytes, Action<bool>? pause = null)
    {
        while (Console.In.ReadLine() is { } line)
        {
            if (line is "pause" or "go")
            {
                pause?.Invoke(line == "pause");
            }
            long allocated = GC.GetTotalAllocatedBytes(precise: true);
            long jitted = JitInfo.GetCompiledMethodCount();
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"count bytes {bytes()} allocated {allocated} jitted {jitted} heap {GC.GetTotalMemory(false)}"));
        }
    }
}
