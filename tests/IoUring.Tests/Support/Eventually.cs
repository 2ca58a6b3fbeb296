namespace IoUring.Tests.Support;

internal static class Eventually
{
    /// <summary>Polls <paramref name="condition"/> for up to 10 s: closes complete asynchronously. The caller asserts afterwards.</summary>
    public static async Task WaitForAsync(Func<bool> condition)
    {
        for (int i = 0; i < 500 && !condition(); i++)
        {
            await Task.Delay(20);
        }
    }
}
