using System.Diagnostics;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>Waits for what the server does after the client is done (closing its side of a connection, for one).</summary>
public static class Eventually
{
    /// <summary>
    /// Polls <paramref name="condition"/> every 20 ms until it holds or <paramref name="timeout"/> (10 s by default) has
    /// passed; returns whether it held. The caller asserts on the values themselves, so a failure shows them.
    /// </summary>
    public static async Task<bool> HoldsAsync(Func<bool> condition, TimeSpan? timeout = null)
    {
        TimeSpan limit = timeout ?? TimeSpan.FromSeconds(10);
        for (var clock = Stopwatch.StartNew(); clock.Elapsed < limit; await Task.Delay(20))
        {
            if (condition())
            {
                return true;
            }
        }
        return condition();
    }
}
