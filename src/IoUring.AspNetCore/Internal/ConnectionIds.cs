namespace IoUring.AspNetCore.Internal;

// Kestrel's style: 13 base-32 characters of a counter seeded from the clock, unlikely to repeat across restarts.
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
