using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Diagnosers;
using BenchmarkDotNet.Jobs;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A short job for the loopback suites, so each finishes in minutes: one launch, thirty warmup and five measured
/// iterations of about a quarter second each. Comparisons within one run (the Ratio column against the
/// System.Net.Sockets baseline) are what the numbers are for; the machine is shared and noisy.
/// The warm-up is long because the two sides start differently: System.Net.Sockets is precompiled (ReadyToRun) in the
/// shared framework, this library is JIT-compiled from tier 0, and on two busy CPUs its hot paths reach tier 1 only
/// seconds in, so two warmup iterations (0.5 s) measured IoUring partly at tier 0. (The single-connection cells still
/// differ from one process to the next; the paired runner, <c>-- --paired 31 echo</c>, compares them in one process:
/// docs/benchmarks.md.)
/// </summary>
public sealed class NetJobConfig : ManualConfig
{
    public NetJobConfig()
    {
        AddJob(Job.Default
            .WithLaunchCount(1)
            .WithWarmupCount(30)
            .WithIterationCount(5)
            .WithIterationTime(Perfolizer.Horology.TimeInterval.FromMilliseconds(250))
            .WithId("NetShort"));
        AddDiagnoser(MemoryDiagnoser.Default);
    }
}

/// <summary>
/// For operations that take a second or more (the accept storm): one invocation per iteration, five warmup (past
/// tier 0, as above) and five measured iterations.
/// </summary>
public sealed class NetStormJobConfig : ManualConfig
{
    public NetStormJobConfig()
    {
        AddJob(Job.Default
            .WithLaunchCount(1)
            .WithWarmupCount(5)
            .WithIterationCount(5)
            .WithInvocationCount(1)
            .WithUnrollFactor(1)
            .WithId("NetStorm"));
        AddDiagnoser(MemoryDiagnoser.Default);
    }
}
