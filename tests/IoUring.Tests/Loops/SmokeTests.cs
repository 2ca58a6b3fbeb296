using IoUring.Tests.Support;

namespace IoUring.Tests.Loops;

public class SmokeTests
{
    [Fact]
    public async Task Nop_round_trip_through_a_handler_returns_the_value()
    {
        using var loop = new EventLoop();
        using var handler = new RecordingHandler(loop);
        await handler.OnLoopAsync(h => h.Submit(RecordingHandler.Nop(), 0xDEADBEEF_CAFEF00DUL));
        await handler.WaitForAsync(1);
        var c = Assert.Single(handler.Completions);
        Assert.Equal(0xDEADBEEF_CAFEF00DUL, c.Value);
        Assert.Equal(0, c.Result);
    }
}
