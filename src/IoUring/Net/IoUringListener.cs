using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A listening socket accepting on every loop, dealing connections to the loops in turn; <see cref="AcceptAsync"/>
/// hands them out, and only then does receiving start.
/// </summary>
[SupportedOSPlatform("linux")]
public sealed class IoUringListener : IAsyncDisposable
{
    private readonly Socket _socket;
    private readonly object _lock = new();
    private readonly Queue<IoUringConnection> _accepted = new();           // under _lock
    private readonly List<TaskCompletionSource<IoUringConnection?>> _waiters = []; // waiting AcceptAsync; under _lock
    private readonly int _capacity;
    // accepted and not yet handed out (queued, or on the way to their loop)
    private int _pending;
    private bool _closed;       // unbound: AcceptAsync returns null; under _lock
    private int _acceptErrno;   // the listening socket broke: AcceptAsync fails; under _lock
    private readonly Acceptor[] _acceptors;
    private readonly TaskCompletionSource _acceptorsFreed = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private int _liveAcceptors;
    private int _unbound;

    internal IoUringListener(Socket socket, IReadOnlyList<EventLoop> loops, ConnectionSettings settings, int backlog)
    {
        _socket = socket;
        _capacity = backlog;
        LocalEndPoint = socket.LocalEndPoint!;
        int fd = (int)socket.Handle;
        if (settings.NoDelay && socket.AddressFamily != AddressFamily.Unix)
        {
            // accepted sockets inherit TCP_NODELAY: one setsockopt instead of one per connection
            socket.NoDelay = true;
        }
        _acceptors = new Acceptor[loops.Count];
        _liveAcceptors = loops.Count;
        for (int i = 0; i < loops.Count; i++)
        {
            settings.BeforeAcceptorCreated?.Invoke(i);
            _acceptors[i] = new Acceptor(loops[i], this, fd, socket.AddressFamily != AddressFamily.Unix, settings);
        }
        // started once all exist: a loop that accepts at once hands connections to the others
        foreach (Acceptor acceptor in _acceptors)
        {
            acceptor.Loop.Post(static a => ((Acceptor)a!).Start(), acceptor);
        }
    }

    /// <summary>The bound endpoint, port 0 resolved.</summary>
    public EndPoint LocalEndPoint { get; }

    /// <summary>Every connection's local endpoint (saves a getsockname each); null for a wildcard address.</summary>
    internal IPEndPoint? AcceptedLocalEndPoint => LocalEndPoint is IPEndPoint ip
        && !ip.Address.Equals(IPAddress.Any) && !ip.Address.Equals(IPAddress.IPv6Any) ? ip : null;

    /// <summary>Accepts that found no fd free (EMFILE/ENFILE), over all loops.</summary>
    public int FdExhaustions => _acceptors.Sum(a => a.FdExhaustions);

    internal int AcceptRequests => _acceptors.Sum(a => a.AcceptRequests);

    /// <summary>The next accepted connection, or null once the listener is unbound or disposed.</summary>
    /// <exception cref="SocketException">The listening socket failed (e.g. <see cref="SocketError.InvalidArgument"/>)
    /// and accepting stopped; connections accepted before are handed out first.</exception>
    public async ValueTask<IoUringConnection?> AcceptAsync(CancellationToken cancellationToken = default)
    {
        IoUringConnection? queued;
        TaskCompletionSource<IoUringConnection?>? waiter = null;
        lock (_lock)
        {
            if (!_accepted.TryDequeue(out queued))
            {
                if (_closed)
                {
                    return null;
                }
                if (_acceptErrno != 0)
                {
                    throw SocketErrors.FromErrno(_acceptErrno);
                }
                cancellationToken.ThrowIfCancellationRequested();
                waiter = new TaskCompletionSource<IoUringConnection?>(
                    TaskCreationOptions.RunContinuationsAsynchronously);
                _waiters.Add(waiter);
            }
        }
        if (waiter is null)
        {
            HandOut(queued!);
            return queued;
        }
        using (cancellationToken.UnsafeRegister(static (s, token) =>
        {
            var (listener, waiter) = ((IoUringListener, TaskCompletionSource<IoUringConnection?>))s!;
            lock (listener._lock)
            {
                if (!listener._waiters.Remove(waiter))
                {
                    return; // it got a connection (or the listener's end) first
                }
            }
            waiter.TrySetCanceled(token);
        }, (this, waiter)))
        {
            return await waiter.Task.ConfigureAwait(false);
        }
    }

    /// <summary>Stops accepting and closes the listening socket; <see cref="AcceptAsync"/> returns null from now on.
    /// Accepted connections stay open.</summary>
    public async ValueTask UnbindAsync()
    {
        if (Interlocked.Exchange(ref _unbound, 1) == 0)
        {
            foreach (Acceptor acceptor in _acceptors)
            {
                StopAcceptor(acceptor);
            }
            IoUringConnection[] orphans;
            List<TaskCompletionSource<IoUringConnection?>> waiters;
            lock (_lock)
            {
                _closed = true;
                orphans = [.. _accepted];
                _accepted.Clear();
                waiters = [.. _waiters];
                _waiters.Clear();
            }
            foreach (TaskCompletionSource<IoUringConnection?> waiter in waiters)
            {
                waiter.TrySetResult(null);
            }
            // accepted but never handed out: nobody owns them
            foreach (IoUringConnection orphan in orphans)
            {
                orphan.Abort();
            }
        }
        // The listening fd is closed only after every accept request on it has completed.
        await _acceptorsFreed.Task.ConfigureAwait(false);
        _socket.Dispose();
    }

    /// <summary>Same as <see cref="UnbindAsync"/>.</summary>
    public ValueTask DisposeAsync() => UnbindAsync();

    private int _nextAcceptor;

    internal Acceptor NextAcceptor()
        => _acceptors[(int)((uint)Interlocked.Increment(ref _nextAcceptor) % (uint)_acceptors.Length)];

    private static void StopAcceptor(Acceptor acceptor)
    {
        try
        {
            acceptor.Loop.Post(static a => ((Acceptor)a!).Stop(), acceptor);
        }
        catch (ObjectDisposedException)
        {
            acceptor.Stop(); // its loop has stopped (cancelling the accept); nothing else touches the acceptor now
        }
    }

    /// <summary>True when full: the acceptor pauses.</summary>
    internal bool OnAccepted() => Interlocked.Increment(ref _pending) >= _capacity;

    /// <summary>An accepted connection closed before anyone took it.</summary>
    internal void OnDropped()
    {
        Interlocked.Decrement(ref _pending);
        ResumeAcceptorsIfRoom(); // else acceptors paused at capacity could wait for a take that never comes
    }

    /// <summary>At half the backlog, so paused acceptors do not resume after every take.</summary>
    internal bool HasRoomToResume() => Volatile.Read(ref _pending) <= _capacity / 2;

    internal void Enqueue(IoUringConnection connection)
    {
        connection.Loop.AssertOnLoopThread();
        TaskCompletionSource<IoUringConnection?> waiter;
        lock (_lock)
        {
            if (_closed)
            {
                OnDropped();
                connection.Abort();
                return;
            }
            if (_waiters.Count == 0)
            {
                _accepted.Enqueue(connection);
                return;
            }
            waiter = _waiters[0];
            _waiters.RemoveAt(0);
        }
        // on the connection's own loop: receiving starts without a post
        HandOut(connection);
        waiter.TrySetResult(connection);
    }

    private void HandOut(IoUringConnection connection)
    {
        connection.StartReceiving(); // a post to its loop unless on it: only for connections that waited in the queue
        int pending = Interlocked.Decrement(ref _pending); // full fence: published before the pause flags are read
        Debug.Assert(pending >= 0, "more connections handed out than accepted");
        ResumeAcceptorsIfRoom();
    }

    private void ResumeAcceptorsIfRoom()
    {
        if (HasRoomToResume())
        {
            foreach (Acceptor acceptor in _acceptors)
            {
                acceptor.Resume();
            }
        }
    }

    /// <summary>Every loop stops accepting; AcceptAsync hands out what was accepted, then fails.</summary>
    internal void OnAcceptFailed(int errno)
    {
        List<TaskCompletionSource<IoUringConnection?>> waiters;
        lock (_lock)
        {
            if (_acceptErrno != 0 || _closed)
            {
                return;
            }
            _acceptErrno = errno;
            waiters = [.. _waiters];
            _waiters.Clear();
        }
        foreach (TaskCompletionSource<IoUringConnection?> waiter in waiters)
        {
            waiter.TrySetException(SocketErrors.FromErrno(errno));
        }
        foreach (Acceptor acceptor in _acceptors)
        {
            StopAcceptor(acceptor);
        }
    }

    internal void OnAcceptorFreed()
    {
        int live = Interlocked.Decrement(ref _liveAcceptors);
        Debug.Assert(live >= 0, "an acceptor freed twice");
        if (live == 0)
        {
            _acceptorsFreed.TrySetResult();
        }
    }
}
