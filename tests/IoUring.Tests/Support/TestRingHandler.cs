using System.Collections.Concurrent;
using IoUring.Interop;
using IoUring.Loops;

namespace IoUring.Tests.Support;

/// <summary>A RingHandler that records every completion and lets a test await a number of them.</summary>
internal sealed class RecordingHandler(EventLoop loop) : RingHandler(loop)
{
    private readonly ConcurrentQueue<(ulong Value, int Result, uint Flags)> _completions = new();
    private readonly SemaphoreSlim _arrived = new(0);
    private readonly TaskCompletionSource _released = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public IReadOnlyCollection<(ulong Value, int Result, uint Flags)> Completions => _completions;

    public Task Released => _released.Task;

    public Func<ulong, int, uint, bool>? Throw { get; set; }

    protected internal override void OnCompletion(ulong userValue, int result, uint flags)
    {
        _completions.Enqueue((userValue, result, flags));
        _arrived.Release();
        if (Throw?.Invoke(userValue, result, flags) == true)
        {
            throw new InvalidOperationException("handler failure for the test");
        }
    }

    protected override void OnReleased() => _released.TrySetResult();

    public async Task WaitForAsync(int count, int timeoutMs = 10_000)
    {
        for (int i = 0; i < count; i++)
        {
            if (!await _arrived.WaitAsync(timeoutMs))
            {
                throw new TimeoutException($"only {i} of {count} completions arrived");
            }
        }
    }

    /// <summary>Runs <paramref name="action"/> on the loop thread and waits for it.</summary>
    public Task OnLoopAsync(Action<RecordingHandler> action)
    {
        var done = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Loop.Schedule(_ =>
        {
            try
            {
                action(this);
                done.SetResult();
            }
            catch (Exception ex)
            {
                done.SetException(ex);
            }
        }, null);
        return done.Task;
    }

    public static io_uring_sqe Nop() => new() { opcode = IoUringConstants.IORING_OP_NOP };
}
