using System.Diagnostics;

namespace IoUring.AspNetCore.Tests.Support;

internal static class Eventually
{
    /// <summary>Polls <paramref name="condition"/> for up to 10 s (closes complete asynchronously). The caller asserts afterwards.</summary>
    public static async Task WaitForAsync(Func<bool> condition)
    {
        for (var clock = Stopwatch.StartNew(); !condition() && clock.Elapsed < TimeSpan.FromSeconds(10);)
        {
            await Task.Delay(20);
        }
    }
}
