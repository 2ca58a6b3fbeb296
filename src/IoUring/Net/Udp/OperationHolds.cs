using System.Diagnostics;

namespace IoUring.Net;

/// <summary>
/// A pooled operation's reference count: its completion and its caller each hold it, so a caller's misuse (a result
/// taken early, or twice) never pools one still in use.
/// </summary>
/// <remarks>A mutable struct: a field of its operation, never copied.</remarks>
internal struct OperationHolds
{
    [ThreadStatic] // the operation whose completion is signalling on this thread
    private static object? t_signalling;

    private int _holds;
    private int _callerDone;

    /// <summary>At the hand-out: both hold it.</summary>
    public void Reset()
    {
        _holds = 2;
        _callerDone = 0;
    }

    /// <summary>The caller took the result, or tried to.</summary>
    public bool CallerDone => Volatile.Read(ref _callerDone) == 1;

    /// <summary>Once, however often it is called; true when the operation is now free.</summary>
    public bool ReleaseCaller() => Interlocked.Exchange(ref _callerDone, 1) == 0 && Release();

    /// <summary>The completion lets go (or will never run); true when the operation is now free.</summary>
    public bool Release()
    {
        int holds = Interlocked.Decrement(ref _holds);
        Debug.Assert(holds >= 0, "an operation released more often than it was held");
        return holds == 0;
    }

    /// <summary>The caller's continuation usually runs inline in the signal: its GetResult then takes the completion's
    /// hold too (<see cref="TakeSignallingHold"/>), so its next operation finds this one in the pool.</summary>
    public static void BeginSignalling(object operation)
    {
        Debug.Assert(t_signalling is null, "a completion signals inside another's signal");
        t_signalling = operation;
    }

    /// <summary>After the signal: true when the completion still holds <paramref name="operation"/> and must release
    /// it. Not read from the operation: if the caller took the hold, it may already serve its next use.</summary>
    public static bool EndSignalling(object operation)
    {
        if (t_signalling != operation)
        {
            return false;
        }
        t_signalling = null;
        return true;
    }

    /// <summary>In the caller's GetResult, before <see cref="ReleaseCaller"/>.</summary>
    public void TakeSignallingHold(object operation)
    {
        if (t_signalling == operation)
        {
            t_signalling = null;
            Release();
        }
    }
}
