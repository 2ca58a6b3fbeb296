using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Diagnosers;
using BenchmarkDotNet.Jobs;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A short job for the loopback suites, so each finishes in minutes: one launch, two warmup and five measured
/// iterations of about a quarter second each. Comparisons within one run (the Ratio column against the
/// System.Net.Sockets baseline) are what the numbers are for; the machine is shared and noisy.
/// </summary>
public sealed class NetJobConfig : ManualConfig
{
    public NetJobConfig()
    {
        AddJob(Job.Default
            .WithLaunchCount(1)
            .WithWarmupCount(2)
            .WithIterationCount(5)
            .WithIterationTime(Perfolizer.Horology.TimeInterval.FromMilliseconds(250))
            .WithId("NetShort"));
        AddDiagnoser(MemoryDiagnoser.Default);
    }
}

/// <summary>
/// For operations that take a second or more (the accept storm): one invocation per iteration, one warmup and five
/// measured iterations.
/// </summary>
public sealed class NetStormJobConfig : ManualConfig
{
    public NetStormJobConfig()
    {
        AddJob(Job.Default
            .WithLaunchCount(1)
            .WithWarmupCount(1)
            .WithIterationCount(5)
            .WithInvocationCount(1)
            .WithUnrollFactor(1)
            .WithId("NetStorm"));
        AddDiagnoser(MemoryDiagnoser.Default);
    }
}
