using System.Diagnostics;
using System.Runtime.ExceptionServices;
using System.Threading.Tasks.Sources;

namespace IoUring.Net;

/// <summary>
/// The one waiting operation of a pipe side (<see cref="ConnectionInput"/>'s read, <see cref="ConnectionOutput"/>'s
/// flush and flushes that joined it) and its ValueTask's state. A mutable struct in a field of its owner (never
/// copied), called under the owner's lock; the <see cref="AwaiterCompletion"/> from <see cref="Complete"/> runs after.
/// </summary>
internal struct Waiter<TResult>
{
    private short _version;
    private bool _completed;          // the outcome is set (_result or _error) and not yet taken
    private int _joined;              // ValueTasks that joined the waiting operation: each takes the outcome too
    private TResult _result;
    private ExceptionDispatchInfo? _error;
    private Action<object?>? _continuation;
    private object? _continuationState;
    private ExecutionContext? _continuationContext;
    private CancellationTokenRegistration _registration;
    // Joined operations' tokens (listed at Join, registered after): they cancel the wait too.
    private List<(CancellationToken Token, CancellationTokenRegistration Registration)>? _joinedTokens;
    // The previous version's outcome, while ValueTasks of it are owed it (a joined flush awaited after a later began).
    private short _heldVersion;
    private int _heldOwed;
    private TResult _heldResult;
    private ExceptionDispatchInfo? _heldError;

    /// <summary>An operation waits: the ValueTask of the current version, not completed yet.</summary>
    public bool IsWaiting { get; private set; }

    public CancellationToken Token { get; private set; }

    /// <summary>Whether <paramref name="token"/> may cancel the waiting operation: its own or a joined one's.</summary>
    public readonly bool Cancels(CancellationToken token)
    {
        if (Token == token)
        {
            return true;
        }
        foreach ((CancellationToken joined, _) in _joinedTokens ?? [])
        {
            if (joined == token)
            {
                return true;
            }
        }
        return false;
    }

    public short Begin(CancellationToken token)
    {
        Debug.Assert(!IsWaiting, "an operation began while another waits");
        // ValueTasks of the last version not awaited yet keep its outcome: they are not this operation's.
        _heldOwed = _completed ? _joined + 1 : 0;
        _heldVersion = _version;
        _heldResult = _completed ? _result : default!;
        _heldError = _completed ? _error : null;
        _result = default!;
        IsWaiting = true;
        Token = token;
        _completed = false;
        _joined = 0;
        _error = null;
        _continuation = null;
        return ++_version;
    }

    /// <summary>A flush while one waits shares its outcome; <paramref name="registerToken"/>: the token is new to this
    /// wait.</summary>
    public short Join(CancellationToken token, out bool registerToken)
    {
        Debug.Assert(IsWaiting, "an operation joined none waiting");
        _joined++;
        // Listed before it is registered, so a token cancelled during its registration still finds the wait.
        registerToken = token.CanBeCanceled && !Cancels(token);
        if (registerToken)
        {
            (_joinedTokens ??= []).Add((token, default));
        }
        return _version;
    }

    /// <summary>Registers outside <paramref name="sync"/> (the owner's lock), then keeps the registration if the
    /// operation of <paramref name="version"/> still waits.</summary>
    public void RegisterToken(object sync, short version, CancellationToken token,
        Action<object?, CancellationToken> onCancelled, object owner)
    {
        Debug.Assert(!Monitor.IsEntered(sync), "a token registered under the owner's lock (its callback takes it)");
        CancellationTokenRegistration registration = token.UnsafeRegister(onCancelled, owner);
        lock (sync)
        {
            if (IsWaiting && _version == version)
            {
                if (token == Token)
                {
                    _registration = registration;
                    return;
                }
                // A joined operation's token cancels the wait too, as with a pipe.
                int index = _joinedTokens!.FindIndex(entry => entry.Token == token && entry.Registration == default);
                if (index >= 0)
                {
                    _joinedTokens[index] = (token, registration);
                    return;
                }
            }
        }
        registration.Unregister(); // completed already
    }

    /// <summary>Run the returned completion after the lock.</summary>
    public AwaiterCompletion Complete(TResult result, Exception? error, bool inlineContinuations)
    {
        Debug.Assert(IsWaiting, "an operation completed none waiting");
        var completion = new AwaiterCompletion(_registration, _continuation, _continuationState, _continuationContext,
            inlineContinuations);
        IsWaiting = false;
        Token = default;
        _registration = default;
        if (_joinedTokens is { Count: > 0 })
        {
            foreach ((_, CancellationTokenRegistration joined) in _joinedTokens)
            {
                joined.Unregister(); // never blocks, so safe under the owner's lock
            }
            _joinedTokens.Clear();
        }
        _continuation = null;
        _continuationState = null;
        _continuationContext = null;
        _completed = true;
        _result = result;
        _error = error is null ? null : ExceptionDispatchInfo.Capture(error);
        return completion;
    }

    public TResult GetResult(short token)
    {
        if (IsHeld(token))
        {
            return TakeHeld();
        }
        if (token != _version || !_completed)
        {
            throw new InvalidOperationException("An operation's result was asked for before it completed, or twice.");
        }
        if (_joined > 0)
        {
            _joined--; // the outcome stays for the other ValueTasks of this version
        }
        else
        {
            _completed = false;
        }
        _error?.Throw();
        TResult result = _result;
        if (!_completed)
        {
            _result = default!;
        }
        return result;
    }

    public readonly ValueTaskSourceStatus GetStatus(short token)
    {
        if (IsHeld(token))
        {
            return StatusOf(_heldError);
        }
        if (token != _version || !_completed)
        {
            return ValueTaskSourceStatus.Pending;
        }
        return StatusOf(_error);
    }

    private static ValueTaskSourceStatus StatusOf(ExceptionDispatchInfo? error)
        => error is null ? ValueTaskSourceStatus.Succeeded
            : error.SourceException is OperationCanceledException ? ValueTaskSourceStatus.Canceled
            : ValueTaskSourceStatus.Faulted;

    private readonly bool IsHeld(short token) => token == _heldVersion && token != _version && _heldOwed > 0;

    private TResult TakeHeld()
    {
        ExceptionDispatchInfo? error = _heldError;
        TResult result = _heldResult;
        if (--_heldOwed == 0)
        {
            _heldError = null;
            _heldResult = default!;
        }
        error?.Throw();
        return result;
    }

    /// <summary>The scheduling context is ignored, as by a pipe without a synchronization context.</summary>
    public void OnCompleted(object sync, Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags, bool inlineContinuations)
    {
        ExecutionContext? context = (flags & ValueTaskSourceOnCompletedFlags.FlowExecutionContext) != 0
            ? ExecutionContext.Capture()
            : null;
        lock (sync)
        {
            // A held version completed before the later operation began: its continuation runs now, below.
            if (!IsHeld(token))
            {
                if (token != _version)
                {
                    throw new InvalidOperationException("An operation was awaited after a later one started.");
                }
                if (!_completed)
                {
                    if (_continuation is not null)
                    {
                        // A joined flush awaited as well as the one it joined: refused, as by a pipe.
                        throw new InvalidOperationException(
                            "The operation is already being awaited: concurrent awaits are not supported.");
                    }
                    _continuation = continuation;
                    _continuationState = state;
                    _continuationContext = context;
                    return;
                }
            }
        }
        // completed meanwhile: run it now
        new AwaiterCompletion(default, continuation, state, context, inlineContinuations).Run();
    }
}
