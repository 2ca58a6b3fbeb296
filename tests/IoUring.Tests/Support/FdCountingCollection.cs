namespace IoUring.Tests.Support;

/// <summary>
/// Tests that count this process's fds run alone: other tests opening rings and sockets in parallel would move
/// the count. xunit runs this collection after the parallel ones.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class FdCountingCollection
{
    public const string Name = "fd counting";
}
