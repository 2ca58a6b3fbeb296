using System.Net.Sockets;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>Connects that race with a loop's stop: they fail cleanly instead of outliving the loop.</summary>
[Collection(FdCountingCollection.Name)]
public sealed class StopRaceTests : IDisposable
{
    private readonly string _path = Path.Combine(Path.GetTempPath(), $"iouring-stop-{Guid.NewGuid():N}.sock");
    private readonly Socket _server = new(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);

    public StopRaceTests()
    {
        // A Unix socket: its connect completes inside the submit, so the CONNECT's success lands in the stop.
        _server.Bind(new UnixDomainSocketEndPoint(_path));
        _server.Listen(16);
    }

    public void Dispose()
    {
        _server.Dispose();
        File.Delete(_path);
    }

    /// <summary>
    /// Holds the loop thread until the returned gate is set, so the test orders the posts behind it. Returns once the
    /// loop is inside the hold: the loop runs the posts it found when it woke, so a post made before that would run
    /// in the same pass as the hold, ahead of the posts made after it (a connect submitted before the stop was posted).
    /// </summary>
    private static ManualResetEventSlim Hold(EventLoop loop)
    {
        var gate = new ManualResetEventSlim();
        using var entered = new ManualResetEventSlim();
        loop.Schedule(static s => { var (e, g) = ((ManualResetEventSlim, ManualResetEventSlim))s!; e.Set(); g.Wait(); }, (entered, gate));
        Assert.True(entered.Wait(TimeSpan.FromSeconds(10)), "the loop did not run the hold");
        return gate;
    }

    private async Task AssertConnectRacingTheStopFailsAsync(bool connectFirst)
    {
        int fds = FdCount.Owned();
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        EventLoop loop = network.Loops[0];
        ValueTask<IoUringConnection> connect;
        Task stopped;
        using (ManualResetEventSlim gate = Hold(loop))
        {
            if (connectFirst)
            {
                connect = network.ConnectAsync(new UnixDomainSocketEndPoint(_path)); // its CONNECT goes in with the stop's cancel-all
                stopped = loop.StopAsync();
            }
            else
            {
                stopped = loop.StopAsync();
                connect = network.ConnectAsync(new UnixDomainSocketEndPoint(_path)); // starts after the stop began
            }
            gate.Set();
        }
        // A stopping network refuses new work as a disposed Socket does.
        await Assert.ThrowsAsync<ObjectDisposedException>(() => connect.AsTask().WaitAsync(TimeSpan.FromSeconds(5)));
        await stopped.WaitAsync(TimeSpan.FromSeconds(5)); // not the 10 s shutdown deadline: nothing was left in flight
        Assert.Equal(0, network.ConnectionCount);
        await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(5));
        Assert.Equal(fds, FdCount.Owned()); // the connect's socket was closed too
    }

    [Fact]
    public Task A_connect_that_starts_after_the_loop_began_stopping_fails_and_leaks_nothing()
        => AssertConnectRacingTheStopFailsAsync(connectFirst: false);

    [Fact]
    public Task A_connect_that_succeeds_while_the_loop_stops_is_closed_and_not_handed_out()
        => AssertConnectRacingTheStopFailsAsync(connectFirst: true);
}
