using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Runtime.Versioning;
using IoUring.Net;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// What Kestrel sees of one io_uring connection: its pipes as <see cref="Transport"/>, and the features Kestrel's own
/// transports give (see the FeatureCollection part).
/// </summary>
/// <remarks>
/// <para><see cref="ConnectionClosed"/> fires once, on the thread pool, when the peer sends FIN or RST (even while the
/// application is not reading) or when the connection has closed, whichever comes first — as with the Sockets
/// transport, where it tells Kestrel that the client has gone.</para>
/// <para><see cref="Abort(ConnectionAbortedException)"/> resets the connection (FIN instead with Kestrel's FinOnError
/// switch); the first reason wins and is what pending reads fail with. <see cref="DisposeAsync"/> (Kestrel calls it
/// when it is done with the connection) sends what is left and FIN, then waits until the socket is closed.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class IoUringConnectionContext : ConnectionContext
{
    private readonly IoUringConnection _connection;
    private readonly IoUringTransport _transport;
    private readonly CancellationTokenSource _closedSource = new();
    private readonly TaskCompletionSource _closedFired = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly KeyValuePair<string, object?> _loopTag; // the metrics' series of this connection's loop
    private CancellationToken _connectionClosed;
    private int _closedTokenFired;   // 1 once FireConnectionClosed has run (or is running): it fires once
    private int _aborted;
    private int _finLogged;      // WriteFin is logged once: at Kestrel's Abort(null), or else at the dispose
    private int _disposed;

    public IoUringConnectionContext(IoUringConnection connection, IoUringTransport transport)
    {
        _connection = connection;
        _transport = transport;
        _loopTag = transport.Metrics.ConnectionOpened(connection.Loop);
        _connectionClosed = _closedSource.Token;
        _transportPipe = connection;
        LocalEndPoint = connection.LocalEndPoint;
        RemoteEndPoint = connection.RemoteEndPoint;

        // IoUringConnection cancels its token on the thread pool, where this fires at once (no second hop); when
        // Kestrel awaits DisposeAsync, that fires it first (IoUringConnection completes Closed before the token).
        _connection.ConnectionClosed.UnsafeRegister(
            static s => ((IoUringConnectionContext)s!).FireConnectionClosed(), this);
        _connection.OnPeerClosed(static (s, reset) => ((IoUringConnectionContext)s!).OnPeerHangup(reset), this);
        if (transport.Logger.IsEnabled(Microsoft.Extensions.Logging.LogLevel.Debug))
        {
            _connection.OnBackpressure(
                static (s, paused) => ((IoUringConnectionContext)s!).OnBackpressure(paused), this);
        }
    }

    internal IoUringConnection Connection => _connection;

    public override string ConnectionId
    {
        get => _connectionId ??= ConnectionIds.Next();
        set => _connectionId = value;
    }

    public override IFeatureCollection Features => this;

    public override IDictionary<object, object?> Items
    {
        get => _items ??= new ConnectionItems();
        set => _items = value;
    }

    public override IDuplexPipe Transport
    {
        get => _transportPipe;
        set => _transportPipe = value;
    }

    public override EndPoint? LocalEndPoint { get; set; }

    public override EndPoint? RemoteEndPoint { get; set; }

    public override CancellationToken ConnectionClosed
    {
        get => _connectionClosed;
        set => _connectionClosed = value;
    }

    public MemoryPool<byte> MemoryPool => _connection.MemoryPool;

    public override void Abort(ConnectionAbortedException abortReason)
    {
        if (abortReason is null)
        {
            // Kestrel passes null when the client has gone (ConnectionClosed fired) and FinOnError is off: it wants
            // FIN, not RST, and completes Transport.Output itself right after this call, which sends FIN once the
            // output is flushed; DisposeAsync then closes. Not a close reason: a later Abort still resets.
            if (Interlocked.Exchange(ref _finLogged, 1) == 0)
            {
                IoUringTransportLog.ConnectionWriteFin(_transport.Logger, ConnectionId,
                    "The client closed the connection.");
            }
            return;
        }
        if (Interlocked.Exchange(ref _aborted, 1) != 0)
        {
            return; // the first reason wins
        }
        IoUringTransportLog.ConnectionWriteRst(_transport.Logger, ConnectionId, abortReason.Message);
        _connection.Abort(abortReason);
    }

    public override async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }
        if (Volatile.Read(ref _aborted) == 0 && Interlocked.Exchange(ref _finLogged, 1) == 0)
        {
            IoUringTransportLog.ConnectionWriteFin(_transport.Logger, ConnectionId,
                "The io_uring transport's connection was disposed after the application completed it.");
        }
        try
        {
            await _connection.DisposeAsync().ConfigureAwait(false);
        }
        catch (Exception ex)
        {
            IoUringTransportLog.ConnectionError(_transport.Logger, ConnectionId, ex);
        }
        _transport.Metrics.ConnectionClosed(_loopTag);
        // The connection has closed: fire ConnectionClosed here if nothing has yet (this runs on the thread pool, in
        // the connection's closed item as a rule: no second hop), or wait for the item that is firing it, before the
        // source goes.
        FireConnectionClosed();
        await _closedFired.Task.ConfigureAwait(false);
        _closedSource.Dispose();
    }

    private void OnBackpressure(bool paused)
    {
        if (paused)
        {
            IoUringTransportLog.ConnectionPause(_transport.Logger, ConnectionId);
        }
        else
        {
            IoUringTransportLog.ConnectionResume(_transport.Logger, ConnectionId);
        }
    }

    /// <summary>The peer sent FIN or RST. Loop thread, or the constructor's if it had already happened.</summary>
    internal void OnPeerHangup(bool reset)
    {
        if (reset)
        {
            IoUringTransportLog.ConnectionReset(_transport.Logger, ConnectionId);
        }
        else
        {
            IoUringTransportLog.ConnectionReadFin(_transport.Logger, ConnectionId);
        }
        ScheduleConnectionClosed();
    }

    /// <summary>From the loop thread: fires <see cref="ConnectionClosed"/> on the thread pool (once).</summary>
    private void ScheduleConnectionClosed()
    {
        if (Volatile.Read(ref _closedTokenFired) != 0)
        {
            return;
        }
        // Never on the loop thread: Kestrel's callbacks on this token do real work.
        ThreadPool.UnsafeQueueUserWorkItem(static c => c.FireConnectionClosed(), this, preferLocal: false);
    }

    /// <summary>On a thread-pool thread, never the loop's: fires <see cref="ConnectionClosed"/> (once), then lets
    /// DisposeAsync finish.</summary>
    private void FireConnectionClosed()
    {
        if (Interlocked.Exchange(ref _closedTokenFired, 1) != 0)
        {
            return;
        }
        try
        {
            _closedSource.Cancel();
        }
        catch (Exception ex)
        {
            IoUringTransportLog.ConnectionError(_transport.Logger, ConnectionId, ex);
        }
        _closedFired.TrySetResult();
    }
}
