using System.Globalization;

namespace IoUring.AspNetCore.Internal;

// On one CPU an idle thread-pool worker's spinning (sched_yield) takes turns with the loop, and under waits such as a
// database's answers it fills the CPU: the transport says so at start (docs/deployment.md).
internal static class ThreadPoolSpinning
{
    internal const string AppContextName = "System.Threading.ThreadPool.UnfairSemaphoreSpinLimit";

    public static bool CostsHere() => CostsHere(
        Environment.ProcessorCount,
        Environment.GetEnvironmentVariable("DOTNET_ThreadPool_UnfairSemaphoreSpinLimit")
            ?? Environment.GetEnvironmentVariable("COMPlus_ThreadPool_UnfairSemaphoreSpinLimit"),
        AppContext.GetData(AppContextName));

    /// <summary>True on one CPU unless the spin limit is 0 (runtimeconfig first, as the runtime reads it).</summary>
    public static bool CostsHere(int processorCount, string? environmentValue, object? appContextValue)
    {
        if (processorCount != 1)
        {
            return false;
        }
        if (appContextValue is not null)
        {
            return !IsZero(Convert.ToString(appContextValue, CultureInfo.InvariantCulture));
        }
        return !IsZero(environmentValue);
    }

    // The runtime reads DOTNET_ numbers as hexadecimal: "0" and "0x0" are both zero.
    private static bool IsZero(string? value)
    {
        string? digits = value?.Trim();
        if (digits is not null && digits.StartsWith("0x", StringComparison.OrdinalIgnoreCase))
        {
            digits = digits[2..];
        }
        return long.TryParse(digits, NumberStyles.AllowHexSpecifier, CultureInfo.InvariantCulture, out long number)
            && number == 0;
    }
}
