namespace IoUring.Net;

// What the connection tells the application: the peer's FIN or reset (once, whichever of the registration and the
// arrival comes last), backpressure, and Closed/ConnectionClosed (signalled on the thread pool).
public sealed partial class IoUringConnection
{
    // What _closedTokenSource holds once the connection has signalled its close without a source made (never disposed:
    // shared by every connection, it has no registrations to release).
    private static readonly CancellationTokenSource s_closedTokenSource = CreateCancelledSource();

    /// <summary>
    /// Calls <paramref name="callback"/> once when the peer's FIN or reset is received (true for a reset) — also while
    /// the application is not reading — on the loop thread, or at once on the calling thread if that already happened.
    /// For transports that must tell their server the client has gone (Kestrel's ConnectionClosed). Register once.
    /// </summary>
    /// <param name="callback">Called with <paramref name="state"/> and whether the peer reset. It must not block or
    /// throw.</param>
    /// <param name="state">Passed to <paramref name="callback"/>.</param>
    public void OnPeerClosed(Action<object?, bool> callback, object? state)
    {
        _peerClosedState = state;
        Interlocked.Exchange(ref _peerClosedCallback, callback); // full fence: published before the kind is read
        DeliverPeerClosed();
    }

    /// <summary>
    /// Calls <paramref name="callback"/> on the loop thread whenever receiving pauses for backpressure (true: the input
    /// pipe is full) and resumes (false), so a transport can log it (Kestrel's Pause/Resume events). Register once.
    /// </summary>
    /// <param name="callback">Called with <paramref name="state"/> and whether receiving paused. It must not block or
    /// throw.</param>
    /// <param name="state">Passed to <paramref name="callback"/>.</param>
    public void OnBackpressure(Action<object?, bool> callback, object? state)
        => ScheduleOnLoop(_ => _receiver.SetBackpressureCallback(callback, state));

    /// <summary>The peer's FIN (<paramref name="reset"/> false) or reset arrived: tell the registered callback
    /// once.</summary>
    internal void NotifyPeerClosed(bool reset)
    {
        if (_peerClosedKind != 0)
        {
            return;
        }
        Interlocked.Exchange(ref _peerClosedKind, reset ? 2 : 1); // full fence: published before the callback is read
        DeliverPeerClosed();
    }

    // Both sides publish, fence, then look at the other's field, so at least one sees both; the flag makes it once.
    private void DeliverPeerClosed()
    {
        int kind = Volatile.Read(ref _peerClosedKind);
        Action<object?, bool>? callback = Volatile.Read(ref _peerClosedCallback);
        if (kind != 0 && callback is not null && Interlocked.Exchange(ref _peerClosedDelivered, 1) == 0)
        {
            callback(_peerClosedState, kind == 2);
        }
    }

    /// <summary>
    /// On the thread pool, once the connection has closed: completes <see cref="Closed"/> (its awaiters continue here:
    /// <see cref="DisposeAsync"/>'s caller), then cancels <see cref="ConnectionClosed"/> (its callbacks run here, and
    /// may block on Closed). The network's disposal waits for this
    /// (<see cref="ConnectionRegistry.WhenClosedSignalled"/>).
    /// </summary>
    internal void SignalClosed()
    {
        ConnectionRegistry? registry = _settings.Registry;
        registry?.BeginClosedSignal(this);
        try
        {
            _closed.TrySetResult();
            // Publishes the cancelled stand-in unless a source is there: a ConnectionClosed read racing this takes one
            // or the other, so every source made is cancelled here, inside the signal the network's dispose awaits.
            if (Interlocked.CompareExchange(ref _closedTokenSource, s_closedTokenSource, null) is { } source)
            {
                CancelClosedToken(source);
            }
        }
        finally
        {
            registry?.EndClosedSignal(this);
        }
    }

    /// <summary>Cancels the ConnectionClosed source; a callback that throws is reported, never thrown at the thread
    /// pool.</summary>
    private void CancelClosedToken(CancellationTokenSource source)
    {
        try
        {
            source.Cancel();
        }
        catch (Exception ex)
        {
            // A callback threw (CancellationTokenSource ran the others first).
            _owner.Loop.ReportUnhandled(ex);
        }
    }

    /// <summary>
    /// The first <see cref="ConnectionClosed"/> read: makes the token source, or returns null when the connection has
    /// closed already (the caller then gets a cancelled token). The source is published by the same exchange as
    /// <see cref="SignalClosed"/>'s stand-in: if it wins, SignalClosed finds and cancels it; if it loses, the stand-in
    /// (cancelled) or another reader's source is returned instead.
    /// </summary>
    private CancellationTokenSource? CreateClosedTokenSource()
    {
        if (Volatile.Read(ref _closedSignalled) != 0)
        {
            return null;
        }
        var source = new CancellationTokenSource();
        _owner.Loop.Options.Hooks?.BeforeClosedTokenSourcePublished?.Invoke();
        if (Interlocked.CompareExchange(ref _closedTokenSource, source, null) is { } existing)
        {
            source.Dispose();
            return existing;
        }
        return source;
    }

    private static CancellationTokenSource CreateCancelledSource()
    {
        var source = new CancellationTokenSource();
        source.Cancel();
        return source;
    }
}
