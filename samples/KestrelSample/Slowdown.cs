using System.Diagnostics;

/// <summary>
/// The self-check of benchmarks/compare.sh: KESTREL_SAMPLE_SLOWDOWN=P (percent, 0 &lt; P &lt; 100) makes the server lose
/// P% of its requests per CPU-second by spinning after each request for a share of what requests cost without the spin
/// (measured from the process's CPU time every quarter second), whatever the scenario. Off unless the variable is set.
/// </summary>
internal static class Slowdown
{
    private const string Variable = "KESTREL_SAMPLE_SLOWDOWN";
    private static readonly long s_measureEvery = Stopwatch.Frequency / 4;
    private static readonly Lock s_measuring = new();

    private static double s_spinFactor;   // extra CPU per request, as a share of the request's own
    private static long s_requests;
    private static long s_spunTicks;      // Stopwatch ticks spent spinning, so the measure of a request's cost leaves them out
    private static long s_spinTicksPerRequest;
    private static long s_lastMeasured;
    private static long s_lastRequests;
    private static long s_lastSpunTicks;
    private static TimeSpan s_lastCpu;

    /// <summary>Reads the variable; returns an error for a value that is not a percentage, null otherwise.</summary>
    public static string? Configure()
    {
        string? value = Environment.GetEnvironmentVariable(Variable);
        if (string.IsNullOrEmpty(value))
        {
            return null;
        }
        if (!double.TryParse(value, System.Globalization.CultureInfo.InvariantCulture, out double percent) || percent is <= 0 or >= 100)
        {
            return $"{Variable}='{value}': give a percentage between 0 and 100 (exclusive).";
        }
        // Requests per CPU-second scale by 1 / (1 + factor): losing P% needs factor = P / (100 - P).
        s_spinFactor = percent / (100 - percent);
        s_lastMeasured = Stopwatch.GetTimestamp();
        s_lastCpu = Environment.CpuUsage.TotalTime;
        return null;
    }

    public static bool IsOn => s_spinFactor > 0;

    public static async Task Middleware(HttpContext context, RequestDelegate next)
    {
        await next(context);
        long requests = Interlocked.Increment(ref s_requests);
        long now = Stopwatch.GetTimestamp();
        if (now - Volatile.Read(ref s_lastMeasured) >= s_measureEvery && s_measuring.TryEnter())
        {
            try
            {
                Measure(now, requests);
            }
            finally
            {
                s_measuring.Exit();
            }
        }
        long spin = Volatile.Read(ref s_spinTicksPerRequest);
        if (spin > 0)
        {
            long end = now + spin;
            while (Stopwatch.GetTimestamp() < end)
            {
                Thread.SpinWait(8);
            }
            Interlocked.Add(ref s_spunTicks, Stopwatch.GetTimestamp() - now);
        }
    }

    private static void Measure(long now, long requests)
    {
        TimeSpan cpu = Environment.CpuUsage.TotalTime;
        long spun = Volatile.Read(ref s_spunTicks);
        long served = requests - s_lastRequests;
        if (served > 0)
        {
            double cpuTicks = (cpu - s_lastCpu).TotalSeconds * Stopwatch.Frequency - (spun - s_lastSpunTicks);
            double ownTicksPerRequest = Math.Max(0, cpuTicks / served);
            Volatile.Write(ref s_spinTicksPerRequest, (long)(ownTicksPerRequest * s_spinFactor));
        }
        s_lastCpu = cpu;
        s_lastRequests = requests;
        s_lastSpunTicks = spun;
        Volatile.Write(ref s_lastMeasured, now);
    }
}
