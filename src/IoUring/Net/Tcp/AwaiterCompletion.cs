namespace IoUring.Net;

/// <summary>
/// What completing a waiting read or flush (<see cref="Waiter{TResult}"/>) leaves to do after the lock: drop the
/// token registration, then run the awaiter's continuation, if any, on the thread pool (or inline), in its captured
/// execution context. Taken under the lock, run outside it: a continuation never runs under a pipe's lock.
/// </summary>
internal struct AwaiterCompletion(CancellationTokenRegistration registration, Action<object?>? continuation,
    object? state, ExecutionContext? context, bool inline)
{
    /// <summary>Set to default by a token's own callback: a registration cannot be dropped from inside its
    /// callback.</summary>
    public CancellationTokenRegistration Registration = registration;

    public readonly void Run()
    {
        Registration.Unregister(); // a cancellation racing this finds nothing waiting
        if (continuation is null)
        {
            return;
        }
        if (context is not null)
        {
            // Rare (an awaiter that flows the execution context): the continuation runs inside it.
            ExecutionContext flowed = context;
            Action<object?> action = continuation;
            Dispatch(s => ExecutionContext.Run(flowed, c => action(c), s), state, inline);
            return;
        }
        Dispatch(continuation, state, inline);
    }

    private static void Dispatch(Action<object?> action, object? state, bool inline)
    {
        if (inline)
        {
            action(state);
        }
        else
        {
            ThreadPool.UnsafeQueueUserWorkItem(action, state, preferLocal: false);
        }
    }
}
