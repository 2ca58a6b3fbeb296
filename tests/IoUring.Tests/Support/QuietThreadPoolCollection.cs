namespace IoUring.Tests.Support;

/// <summary>
/// Tests that need the thread pool idle run alone: a flush sends by itself only when no work is queued on the pool
/// (ConnectionOutput), and other tests running in parallel keep it busy. xunit runs this collection after the parallel ones.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class QuietThreadPoolCollection
{
    public const string Name = "quiet thread pool";
}
