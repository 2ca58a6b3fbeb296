namespace IoUring.Tests.Support;

/// <summary>
/// Tests that read the process-wide "IoUring" meter run alone: every network made without a meter factory adds its
/// loops' counts there, so networks of tests running in parallel would move them. xunit runs this collection after the
/// parallel ones.
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class GlobalMeterCollection
{
    public const string Name = "global meter";
}
