using System.Diagnostics;
using System.Runtime.Versioning;

namespace IoUring.Net;

/// <summary>
/// The live connections of a network, so that disposing it (or a loop's stop) can close them: a doubly linked list
/// through the connections themselves, so registering allocates nothing.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class ConnectionRegistry
{
    private readonly Lock _lock = new();
    private IoUringConnection? _first;
    private int _count;
    private int _signalsPending;  // removed, Closed not completed yet
    private IoUringConnection? _awaitedExcept; // the signal WhenClosedSignalled's caller runs inside, if still running
    private TaskCompletionSource? _signalled;
    // The connection whose Closed this thread is signalling: a network disposed from inside must not wait for it.
    [ThreadStatic] private static IoUringConnection? t_signalling;

    public static IoUringConnection? SignallingOnThisThread => t_signalling;

    public int Count => Volatile.Read(ref _count);

    public void Add(IoUringConnection connection)
    {
        lock (_lock)
        {
            Debug.Assert(connection.RegistryPrevious is null && connection.RegistryNext is null && _first != connection,
                "a connection registered twice");
            connection.RegistryNext = _first;
            if (_first is not null)
            {
                _first.RegistryPrevious = connection;
            }
            _first = connection;
            _count++;
        }
    }

    public void Remove(IoUringConnection connection)
    {
        lock (_lock)
        {
            if (connection.RegistryPrevious is { } previous)
            {
                previous.RegistryNext = connection.RegistryNext;
            }
            else
            {
                _first = connection.RegistryNext;
            }
            if (connection.RegistryNext is { } next)
            {
                next.RegistryPrevious = connection.RegistryPrevious;
            }
            connection.RegistryPrevious = connection.RegistryNext = null;
            _count--;
            Debug.Assert(_count >= 0, "more connections removed than added");
            _signalsPending++;
        }
    }

    /// <summary>A removed connection starts telling its application (on this thread) that it closed.</summary>
    public void BeginClosedSignal(IoUringConnection connection)
    {
        Debug.Assert(t_signalling is null, "closed signals nested on one thread");
        t_signalling = connection;
    }

    /// <summary>That connection's Closed has completed and its callbacks have run.</summary>
    public void EndClosedSignal(IoUringConnection connection)
    {
        Debug.Assert(t_signalling == connection, "a closed signal ended on another thread than it began");
        t_signalling = null;
        lock (_lock)
        {
            Debug.Assert(!connection.ClosedSignalEnded && _signalsPending > 0, "a closed signal ended twice");
            connection.ClosedSignalEnded = true;
            _signalsPending--;
            if (_awaitedExcept == connection)
            {
                _awaitedExcept = null;
            }
            CompleteWaitIfDone();
        }
    }

    /// <summary>Every removed connection has completed its Closed, but <paramref name="except"/>, whose signal the
    /// caller runs inside (<see cref="SignallingOnThisThread"/>).</summary>
    public Task WhenClosedSignalled(IoUringConnection? except)
    {
        lock (_lock)
        {
            _awaitedExcept = except is { ClosedSignalEnded: false } && except.Registry == this ? except : null;
            _signalled ??= new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            Task waited = _signalled.Task;
            CompleteWaitIfDone();
            return waited;
        }
    }

    private void CompleteWaitIfDone()
    {
        Debug.Assert(_lock.IsHeldByCurrentThread, "called without the lock");
        if (_signalled is { } signalled && _signalsPending <= (_awaitedExcept is null ? 0 : 1))
        {
            _signalled = null;
            _awaitedExcept = null;
            signalled.TrySetResult();
        }
    }

    /// <summary>The connections registered now (a copy: closing them changes the list).</summary>
    public IoUringConnection[] Snapshot()
    {
        lock (_lock)
        {
            var connections = new IoUringConnection[_count];
            int i = 0;
            for (IoUringConnection? connection = _first; connection is not null; connection = connection.RegistryNext)
            {
                connections[i++] = connection;
            }
            return connections;
        }
    }
}
