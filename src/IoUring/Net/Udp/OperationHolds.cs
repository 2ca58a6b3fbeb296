using System.Diagnostics;

namespace IoUring.Net;

/// <summary>
/// Who still holds a pooled operation handed to a caller: its completion and its caller. It goes back to the pool when
/// both have let go, so a caller's misuse (a result taken early, or twice) never returns one still in use.
/// </summary>
/// <remarks>A mutable struct: a field of its operation, never copied.</remarks>
internal struct OperationHolds
{
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

    /// <summary>The caller lets go (once, however often it calls); true when the operation is now free.</summary>
    public bool ReleaseCaller() => Interlocked.Exchange(ref _callerDone, 1) == 0 && Release();

    /// <summary>The completion lets go (or will never run); true when the operation is now free.</summary>
    public bool Release()
    {
        int holds = Interlocked.Decrement(ref _holds);
        Debug.Assert(holds >= 0, "an operation released more often than it was held");
        return holds == 0;
    }
}
