namespace IoUring.AspNetCore.Internal;

/// <summary>
/// Connection ids in Kestrel's style: 13 base-32 characters of a process-wide counter seeded from the clock, so ids
/// are unique within a process and unlikely to repeat across restarts.
/// </summary>
internal static class ConnectionIds
{
    private const string Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUV";
    private static long s_last = DateTime.UtcNow.Ticks;

    public static string Next() => string.Create(13, Interlocked.Increment(ref s_last), static (span, id) =>
    {
        for (int i = span.Length - 1; i >= 0; i--)
        {
            span[i] = Alphabet[(int)(id & 31)];
            id >>= 5;
        }
    });
}
