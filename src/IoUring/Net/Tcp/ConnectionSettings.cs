using System.Buffers;
using System.Diagnostics;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Rings;
using IoUring.Testing;

namespace IoUring.Net;

/// <summary>What every connection of one network shares: options, memory pool, error types, the live set. A record, so
/// a layer above overrides with <c>with</c> and keeps every other setting.</summary>
[SupportedOSPlatform("linux")]
internal sealed record ConnectionSettings
{
    /// <summary>The pipes' pool, or null: each loop's own (<see cref="Loops.EventLoop.MemoryPool"/>, registered with
    /// its ring).</summary>
    public required MemoryPool<byte>? MemoryPool { get; init; }
    public long? MaxReadBufferSize { get; init; }
    public long? MaxWriteBufferSize { get; init; }
    public bool NoDelay { get; init; }
    public bool MultishotAccept { get; init; } = true;
    public bool UnsafePreferInlineScheduling { get; init; }
    public bool AbortWithReset { get; init; }
    public long ZeroCopySendThreshold { get; init; } = long.MaxValue;
    /// <summary>Test seam (<see cref="TestHooks.IgnoreZeroCopyCopied"/>).</summary>
    public bool IgnoreZeroCopyCopied { get; init; }
    /// <summary>A flush may send from its own thread while the loop sleeps (<see cref="ConnectionOutput"/>); off by
    /// <see cref="TestHooks.NoCallerSends"/>.</summary>
    public bool CallerSends { get; init; } = true;
    public ConnectionRegistry? Registry { get; init; }

    /// <summary>Segment objects shared by the connections' outputs.</summary>
    public OutputSegmentPool OutputSegments { get; init; } = new();

    /// <summary>Test seam (<see cref="TestHooks.BeforeAcceptorCreated"/>).</summary>
    public Action<int>? BeforeAcceptorCreated { get; init; }

    /// <summary>What the kernel offers (tests replace it to act as an older kernel).</summary>
    public required IoUringCapabilities Capabilities { get; init; }

    /// <summary>The exception a peer reset surfaces as (the Kestrel layer makes it ConnectionResetException).</summary>
    public Func<string, Exception> CreateResetException { get; init; } =
        static message => new IOException(message, new SocketException((int)SocketError.ConnectionReset));

    /// <summary>The exception reads fail with after an abort (the Kestrel layer makes it
    /// ConnectionAbortedException).</summary>
    public Func<string, Exception> CreateAbortedException { get; init; } =
        static message => new IOException(message, new SocketException((int)SocketError.OperationAborted));

    /// <summary>A failed send's error (errno positive): a reset for EPIPE and ECONNRESET, else an IOException naming
    /// it.</summary>
    public Exception CreateSendException(int errno) => errno is Errno.EPIPE or Errno.ECONNRESET
        ? CreateResetException("Connection reset by peer.")
        : new IOException($"Send failed: {IoUringException.ErrnoName(errno)}.", SocketErrors.FromErrno(errno));

    public static ConnectionSettings From(IoUringNetworkOptions options, MemoryPool<byte>? pool,
        ConnectionRegistry registry, IoUringCapabilities capabilities)
    {
        var settings = new ConnectionSettings
        {
            MemoryPool = pool,
            Capabilities = capabilities,
            MaxReadBufferSize = options.MaxReadBufferSize,
            MaxWriteBufferSize = options.MaxWriteBufferSize,
            NoDelay = options.NoDelay,
            MultishotAccept = options.MultishotAccept,
            UnsafePreferInlineScheduling = options.UnsafePreferInlineScheduling,
            AbortWithReset = options.AbortWithReset,
            ZeroCopySendThreshold = options.ZeroCopySendThreshold ?? long.MaxValue,
            IgnoreZeroCopyCopied = options.Loop.Hooks?.IgnoreZeroCopyCopied ?? false,
            CallerSends = options.Loop.Hooks?.NoCallerSends != true,
            BeforeAcceptorCreated = options.Loop.Hooks?.BeforeAcceptorCreated,
            Registry = registry,
        };
        return settings with
        {
            CreateResetException = options.CreateResetException ?? settings.CreateResetException,
            CreateAbortedException = options.CreateAbortedException ?? settings.CreateAbortedException,
        };
    }
}

/// <summary>
/// The live connections of a network, so that disposing it (or a loop's stop) can close them: a doubly linked list
/// through the connections themselves (<see cref="IoUringConnection.RegistryPrevious"/>,
/// <see cref="IoUringConnection.RegistryNext"/>), so registering one allocates nothing. Added and removed on the loops'
/// threads, under one lock. A removed connection still tells its application on the thread pool
/// (<see cref="IoUringConnection.Closed"/>); the network's disposal waits for that too
/// (<see cref="WhenClosedSignalled"/>).
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
    // The connection this thread is telling its application that it closed (Closed's awaiters and ConnectionClosed's
    // callbacks run inside): a network disposed synchronously from there must not wait for that one.
    [ThreadStatic] private static IoUringConnection? t_signalling;

    /// <summary>The connection whose close this thread is signalling right now (see
    /// <see cref="WhenClosedSignalled"/>).</summary>
    public static IoUringConnection? SignallingOnThisThread => t_signalling;

    public int Count => Volatile.Read(ref _count);

    public void Add(IoUringConnection connection)
    {
        lock (_lock)
        {
            connection.RegistryNext = _first;
            if (_first is not null)
            {
                _first.RegistryPrevious = connection;
            }
            _first = connection;
            _count++;
        }
    }

    /// <summary>Removes a connection <see cref="Add"/> added (once).</summary>
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
            _signalsPending++;
        }
    }

    /// <summary>A removed connection starts telling its application (on this thread) that it closed.</summary>
    public void BeginClosedSignal(IoUringConnection connection) => t_signalling = connection;

    /// <summary>That connection's Closed has completed and its callbacks have run.</summary>
    public void EndClosedSignal(IoUringConnection connection)
    {
        t_signalling = null;
        lock (_lock)
        {
            connection.ClosedSignalEnded = true;
            _signalsPending--;
            if (_awaitedExcept == connection)
            {
                _awaitedExcept = null;
            }
            CompleteWaitIfDone();
        }
    }

    /// <summary>
    /// Completes when every removed connection has completed its Closed (connections still registered not counted),
    /// except <paramref name="except"/> while its signal still runs: the caller runs inside that signal (it took
    /// <see cref="SignallingOnThisThread"/> before its first await), and blocking on it would wait for itself.
    /// </summary>
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

    private void CompleteWaitIfDone() // under the lock
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
