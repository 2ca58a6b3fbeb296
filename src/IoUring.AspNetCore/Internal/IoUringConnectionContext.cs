using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net;
using System.Runtime.Versioning;
using IoUring.Net;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// What Kestrel sees of one io_uring connection. <see cref="ConnectionClosed"/> fires once, on the thread pool, at the
/// peer's FIN or RST or at the close, whichever comes first (as on Sockets). Abort resets (FIN with Kestrel's
/// FinOnError; first reason wins); <see cref="DisposeAsync"/> sends what is left and FIN, then waits for the close.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed partial class IoUringConnectionContext : ConnectionContext
{
    private readonly IoUringConnection _connection;
    private readonly IoUringTransport _transport;
    private readonly CancellationTokenSource _closedSource = new();
    private readonly TaskCompletionSource _closedFired = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private readonly KeyValuePair<string, object?> _loopTag; // the metrics' series of this connection's loop
    private CancellationToken _connectionClosed;
    private int _closedTokenFired;
    private int _aborted;
    private int _finLogged; // at Kestrel's Abort(null), or else at the dispose
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

        // The connection cancels its token on the thread pool: fire there, no second hop.
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
            // Kestrel's "client gone, send FIN": it completes Transport.Output next. Not a close reason: a later
            // Abort still resets. Logged once (Peer_fin_is_logged_with_the_sockets_transport_event_id).
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
        // Fire here if nothing has yet, else wait for whoever is firing, before the source goes
        // (Client_gone_between_requests_fires_ConnectionClosed).
        FireConnectionClosed();
        await _closedFired.Task.ConfigureAwait(false);
        _closedSource.Dispose();
    }

    private void OnBackpressure(bool paused)
    {
        Debug.Assert(_connection.Loop.IsOnLoopThread, "backpressure is reported by the loop's receiver");
        if (paused)
        {
            IoUringTransportLog.ConnectionPause(_transport.Logger, ConnectionId);
        }
        else
        {
            IoUringTransportLog.ConnectionResume(_transport.Logger, ConnectionId);
        }
    }

    // Loop thread, or the constructor's if the peer had already gone.
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

    private void ScheduleConnectionClosed()
    {
        if (Volatile.Read(ref _closedTokenFired) != 0)
        {
            return;
        }
        // Never on the loop thread: Kestrel's callbacks on this token do real work.
        ThreadPool.UnsafeQueueUserWorkItem(static c => c.FireConnectionClosed(), this, preferLocal: false);
    }

    // Once, on the thread pool; then lets DisposeAsync finish.
    private void FireConnectionClosed()
    {
        if (Interlocked.Exchange(ref _closedTokenFired, 1) != 0)
        {
            return;
        }
        Debug.Assert(!_closedFired.Task.IsCompleted, "the close is signalled once, after the token");
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
