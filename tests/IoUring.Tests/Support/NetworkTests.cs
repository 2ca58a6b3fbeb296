using IoUring.Net;

namespace IoUring.Tests.Support;

/// <summary>Tests that each get a fresh <see cref="IoUringNetwork"/> of <paramref name="loopCount"/> loops, disposed
/// after the test.</summary>
public abstract class NetworkTests(int loopCount = 1) : IAsyncLifetime
{
    /// <summary>A hang guard for awaits, not a timing goal.</summary>
    protected static readonly TimeSpan Timeout = TimeSpan.FromSeconds(10);

    /// <summary>This test's network.</summary>
    protected IoUringNetwork Network { get; private set; } = null!;

    public Task InitializeAsync()
    {
        Network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = loopCount });
        return Task.CompletedTask;
    }

    public async Task DisposeAsync() => await Network.DisposeAsync();
}
