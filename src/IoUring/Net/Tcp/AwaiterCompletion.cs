namespace IoUring.Net;

/// <summary>
/// What completing a <see cref="Waiter{TResult}"/> leaves to do after the lock: drop the token registration, then run
/// the continuation. Taken under the lock, run outside it: a continuation never runs under a pipe's lock.
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
