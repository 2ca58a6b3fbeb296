namespace IoUring.Tests.Support;

/// <summary>
/// Tests that misuse the diagnostic pools on purpose run alone: a problem is recorded for the whole suite before the
/// test takes it back, and a test ending in parallel meanwhile would fail with it (seen on 6.1 under qemu).
/// </summary>
[CollectionDefinition(Name, DisableParallelization = true)]
public sealed class DeliberatePoolProblemsCollection
{
    public const string Name = "deliberate pool problems";
}
