using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// A connected socket driven by an io_uring loop, exposed as a pair of pipes: read what the peer sent from
/// <see cref="Input"/>, write what to send to <see cref="Output"/>.
/// </summary>
/// <remarks>
/// <para>The connection lives on one <see cref="EventLoop"/> for its whole life. Receiving is one multishot RECV
/// that takes buffers from the loop's buffer ring; <see cref="Input"/> keeps the buffers the kernel filled (or copies
/// small receives), see <see cref="ConnectionInput"/>. Sending takes what <see cref="Output"/> has flushed on the loop
/// and sends it from the blocks it was written to in one SEND/SENDMSG, see <see cref="ConnectionOutput"/>.</para>
/// <para>Completing <see cref="Output"/> sends FIN after the data. When the peer's FIN arrives, <see cref="Input"/>
/// completes. A peer reset fails <see cref="Input"/>'s reads with an <see cref="IOException"/> (the Kestrel
/// transport turns it into ConnectionResetException). <see cref="Abort(Exception?)"/> resets the connection (RST).</para>
/// </remarks>
[SupportedOSPlatform("linux")]
public sealed partial class IoUringConnection : IDuplexPipe, IAsyncDisposable
{
    private readonly ConnectionRingOwner _owner;
    private readonly ConnectionSettings _settings;
    private readonly int _fd;
    private readonly bool _isTcp;
    private readonly ConnectionOutput _output;
    private readonly ConnectionReceiver _receiver;
    private readonly ConnectionSender _sender;
    private CancellationTokenSource? _closedTokenSource; // made when ConnectionClosed is first asked for
    private int _closedSignalled;   // 1 once closed: a token source made from then on is cancelled at once
    // Completed only from the thread-pool item that OnClosed queues, so its awaiters continue there, inline (one hop
    // per close for the token and Closed together, not one each).
    private readonly TaskCompletionSource _closed = new();
    private ConnectionState _state; // loop thread
    // The endpoints are made when first asked for (few applications but Kestrel ask): the local one as this connection's
    // own copy of its listener's (IPEndPoint is mutable), else read at start; the peer's parsed from its address, read at
    // start (the fd number may belong to another socket after close, and a reset peer has no address).
    private IPEndPoint? _listenerEndPoint;
    private EndPoint? _localEndPoint;
    private EndPoint? _remoteEndPoint;
    private InetSocketAddress _remoteAddress;
    private int _remoteAddressLength;
    private Exception? _abortReason;
    private int _abortRequested;
    private bool _abortWithReset;
    private bool _abortiveClose;
    // The peer-closed notification, registered from any thread without a post to the loop (one per accepted
    // connection under Kestrel): 0 until the peer's FIN (1) or reset (2) arrived, set by the loop.
    private int _peerClosedKind;
    private Action<object?, bool>? _peerClosedCallback;
    private object? _peerClosedState;
    private int _peerClosedDelivered;

    /// <summary>The network's <see cref="ConnectionRegistry"/> list (under its lock).</summary>
    internal IoUringConnection? RegistryPrevious, RegistryNext;

    /// <summary>Closed has completed and ConnectionClosed's callbacks have run (under the registry's lock).</summary>
    internal bool ClosedSignalEnded;

    /// <summary>The network's registry this connection is (or was) in; null outside a network.</summary>
    internal ConnectionRegistry? Registry => _settings.Registry;

    /// <summary>
    /// The connection's lifecycle, in this order only (each step is the only legal next one, asserted in
    /// <see cref="MoveTo"/>). The fd number stays this connection's until <see cref="FdClosed"/>: no request on it can
    /// still run then, so its reuse by another socket cannot reach this connection's requests.
    /// </summary>
    private enum ConnectionState
    {
        /// <summary>Receiving and sending, each until its own end (FIN either way, the reader gone).</summary>
        Open,
        /// <summary>Closing: Input completed, every request on the fd cancelled; waiting for their final CQEs (zero-copy notifications excepted).</summary>
        Cancelling,
        /// <summary>Nothing but notifications in flight: the CLOSE is submitted (the Socket handed out is disposed first).</summary>
        ClosingFd,
        /// <summary>The CLOSE completed.</summary>
        FdClosed,
        /// <summary>The application was told (<see cref="Closed"/>, <see cref="ConnectionClosed"/>); the owner is released
        /// (its GCHandle and the send memory are freed after the last zero-copy notification).</summary>
        Closed,
    }

    /// <summary>A connection on <paramref name="loop"/> over the connected socket <paramref name="fd"/> (TCP when
    /// <paramref name="isTcp"/>), with <paramref name="settings"/>.</summary>
    internal IoUringConnection(EventLoop loop, int fd, bool isTcp, ConnectionSettings settings)
    {
        _fd = fd;
        _isTcp = isTcp;
        _settings = settings;
        _owner = new ConnectionRingOwner(loop, this);
        // The loop's own pool unless the settings name one: its blocks are registered with the loop's ring, so large
        // sends from them go zero-copy from fixed buffers.
        MemoryPool = settings.MemoryPool ?? loop.MemoryPool;
        // A flush sends from its own thread only below the zero-copy threshold while the sender sends zero-copy: larger
        // sends are the ring's then.
        long callerSendLimit = settings.CallerSends ? settings.ZeroCopySendThreshold - 1 : 0;
        _output = new ConnectionOutput(_owner, loop, MemoryPool, settings.OutputSegments, settings.MaxWriteBufferSize ?? 0,
            settings.UnsafePreferInlineScheduling, fd, callerSendLimit);
        _receiver = new ConnectionReceiver(this, _owner, fd, settings.MaxReadBufferSize, settings.UnsafePreferInlineScheduling, settings.Capabilities);
        _sender = new ConnectionSender(this, _owner, fd, isTcp, _output, settings);
        _output.SetSender(_sender, _receiver.Input);
    }

    /// <summary>What the peer sent. Completes at the peer's FIN; fails on reset or abort.</summary>
    public PipeReader Input => _receiver.Input;

    /// <summary>What to send. Complete it to send FIN after the data.</summary>
    /// <remarks>
    /// A <c>WriteAsync</c> at least as large as <see cref="IoUringNetworkOptions.MaxWriteBufferSize"/> is sent from the
    /// caller's memory, not copied: leave that memory unchanged until the returned task completes (as with
    /// <c>Stream.WriteAsync</c> or <c>Socket.SendAsync</c>; a <c>Pipe</c>'s writer copies before returning).
    /// </remarks>
    public PipeWriter Output => _output;

    /// <summary>The loop this connection runs on.</summary>
    public EventLoop Loop => _owner.Loop;

    /// <summary>The local endpoint (read when the connection started: the fd number may belong to another socket after close).</summary>
    public EndPoint? LocalEndPoint => Volatile.Read(ref _localEndPoint) ?? CopyListenerEndPoint();

    /// <summary>The peer's endpoint (read when the connection started).</summary>
    public EndPoint? RemoteEndPoint => Volatile.Read(ref _remoteEndPoint) ?? ParseRemoteAddress();

    private EndPoint? CopyListenerEndPoint()
    {
        if (_listenerEndPoint is not { } bound)
        {
            return null;
        }
        var copy = new IPEndPoint(bound.Address, bound.Port);
        return Interlocked.CompareExchange(ref _localEndPoint, copy, null) ?? copy;
    }

    private EndPoint? ParseRemoteAddress()
    {
        if (_remoteAddressLength == 0)
        {
            return null;
        }
        EndPoint? parsed = SocketAddresses.Parse(((ReadOnlySpan<byte>)_remoteAddress)[.._remoteAddressLength]);
        return Interlocked.CompareExchange(ref _remoteEndPoint, parsed, null) ?? parsed;
    }

    /// <summary>
    /// Cancelled (on the thread pool, once) when the connection has closed and its fd is released (and <see cref="Socket"/>'s,
    /// if taken). Asked for after that, an already cancelled token.
    /// </summary>
    public CancellationToken ConnectionClosed => (Volatile.Read(ref _closedTokenSource) ?? CreateClosedTokenSource())?.Token ?? new CancellationToken(canceled: true);

    /// <summary>
    /// Completes when the connection has closed and its fd is released: on a thread-pool thread (never the loop's, so a
    /// continuation may run synchronously), just before <see cref="ConnectionClosed"/> is cancelled on the same thread.
    /// </summary>
    public Task Closed => _closed.Task;

    /// <summary>
    /// The socket's file descriptor, valid until <see cref="Closed"/>. Do not close it. After close the number may
    /// belong to another socket: for anything that may run late, use <see cref="Socket"/>.
    /// </summary>
    public int FileDescriptor => _fd;

    /// <summary>Bytes received from the peer so far.</summary>
    public long BytesReceived => _receiver.BytesReceived;

    /// <summary>Bytes sent to the peer so far.</summary>
    public long BytesSent => _sender.BytesSent;

    /// <summary>Sends made with SEND_ZC/SENDMSG_ZC.</summary>
    public int ZeroCopySends => _sender.ZeroCopySends;

    /// <summary>
    /// True once the connection went back to plain sends: the kernel reported that a zero-copy send was copied after all,
    /// or refused one (EINVAL: a kernel without a feature it needs), which was then sent again plainly.
    /// </summary>
    public bool ZeroCopyReverted => _sender.ZeroCopyReverted;

    internal ConnectionReceiver Receiver => _receiver;

    internal ConnectionSender Sender => _sender;

    /// <summary>The pool <see cref="Output"/> rents from: its loop's <see cref="EventLoop.MemoryPool"/>, unless the network was given one.</summary>
    public MemoryPool<byte> MemoryPool { get; }

    internal ConnectionSettings Settings => _settings;

    /// <summary>Closing has begun (loop thread): no new receive or send is started.</summary>
    internal bool IsClosing => _state != ConnectionState.Open;

    /// <summary>A <see cref="Stream"/> over the two pipes. Disposing it completes them but does not close the connection.</summary>
    public Stream AsStream() => new DuplexPipeStream(Input, Output);

    /// <summary>
    /// A <see cref="Stream"/> over the two pipes. With <paramref name="ownsConnection"/> disposing it also closes the
    /// connection (without waiting for it), as disposing a NetworkStream that owns its socket closes the socket: hand
    /// it to code that only knows streams (HttpClient's ConnectCallback, SslStream). The close is graceful (what is left
    /// of the output is sent, then FIN); if the peer has not taken it within 5 seconds, the connection is aborted (RST)
    /// so its fd and buffers are released rather than held for as long as the peer does not read.
    /// </summary>
    public Stream AsStream(bool ownsConnection) => new DuplexPipeStream(Input, Output, ownsConnection ? this : null);

    /// <summary>
    /// Closes the connection abortively: pending reads fail with <paramref name="reason"/>, unsent data is dropped and
    /// the peer gets RST (unless <see cref="IoUringNetworkOptions.AbortWithReset"/> is false). The first reason wins.
    /// </summary>
    public void Abort(Exception? reason) => Abort(reason, _settings.AbortWithReset);

    /// <summary>Abort was called (any thread): from then on nothing more is sent, also what is flushed before the loop closes.</summary>
    internal bool AbortRequested => Volatile.Read(ref _abortRequested) != 0;

    /// <summary>As <see cref="Abort(Exception?)"/> with the default reason (reads fail with an <see cref="IOException"/>).</summary>
    public void Abort() => Abort(null, _settings.AbortWithReset);

    /// <summary>As <see cref="Abort(Exception?)"/>, choosing per call whether the peer gets RST (<paramref name="reset"/>) or FIN.</summary>
    public void Abort(Exception? reason, bool reset)
    {
        if (Interlocked.Exchange(ref _abortRequested, 1) != 0)
        {
            return;
        }
        _abortReason = reason ?? _settings.CreateAbortedException("The connection was aborted by the application.");
        _abortWithReset = reset;
        ScheduleOnLoop(static c => ((IoUringConnection)c!).BeginAbortiveClose());
    }

    /// <summary>
    /// Calls <paramref name="callback"/> once when the peer's FIN or reset is received (true for a reset) — also while
    /// the application is not reading — on the loop thread, or at once on the calling thread if that already happened.
    /// For transports that must tell their server the client has gone (Kestrel's ConnectionClosed). Register once.
    /// </summary>
    /// <param name="callback">Called with <paramref name="state"/> and whether the peer reset. It must not block or throw.</param>
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
    /// <param name="callback">Called with <paramref name="state"/> and whether receiving paused. It must not block or throw.</param>
    /// <param name="state">Passed to <paramref name="callback"/>.</param>
    public void OnBackpressure(Action<object?, bool> callback, object? state)
        => ScheduleOnLoop(_ => _receiver.SetBackpressureCallback(callback, state));

    /// <summary>
    /// Ends the connection gracefully and waits until its fd is released: completes <see cref="Input"/> and
    /// <see cref="Output"/> if the application has not, sends what is left of the output followed by FIN, then closes.
    /// A peer that never reads keeps it waiting: use <see cref="Abort(Exception?)"/> to cut it off.
    /// </summary>
    public ValueTask DisposeAsync()
    {
        try
        {
            _receiver.Input.Complete();
            _output.Complete();
            ScheduleOnLoop(static c => ((IoUringConnection)c!)._receiver.OnReaderGone());
        }
        catch (Exception ex)
        {
            return ValueTask.FromException(ex); // as an async method would: the caller sees it when it awaits
        }
        return new ValueTask(_closed.Task);
    }

    /// <param name="noDelayInherited">Accepted from a listener with TCP_NODELAY set, which the socket inherited.</param>
    /// <param name="receive">Start receiving now; an accepted connection starts when the application takes it (<see cref="StartReceiving"/>).</param>
    /// <param name="listenerEndPoint">The local endpoint when the caller knows it (a listener bound to one address: shared,
    /// copied when first asked for), else read.</param>
    internal void Start(bool noDelayInherited = false, bool receive = true, IPEndPoint? listenerEndPoint = null)
    {
        _owner.Loop.AssertOnLoopThread();
        if (_settings.NoDelay && _isTcp && !noDelayInherited)
        {
            _ = Libc.SetIntOption(_fd, Libc.IPPROTO_TCP, Libc.TCP_NODELAY, 1);
        }
        _settings.Registry?.Add(this);
        // Read now: after close the fd number may belong to another socket.
        _listenerEndPoint = listenerEndPoint;
        _localEndPoint = listenerEndPoint is null ? SocketAddresses.GetLocal(_fd) : null;
        _remoteAddressLength = SocketAddresses.ReadRemote(_fd, ref _remoteAddress, out _remoteEndPoint);
        if (receive)
        {
            _receiver.Start();
        }
        _receiver.ArmHangUpPoll(); // also for a connection not accepted yet: a reset before the application takes it is noticed
        _sender.Start();
    }

    /// <summary>
    /// Starts receiving a connection the listener held back until the application accepted it, so that connections
    /// nobody has accepted yet cost no receive memory (their bytes wait in the kernel, as with an accept backlog).
    /// </summary>
    internal void StartReceiving() => ScheduleOnLoop(static c => ((IoUringConnection)c!)._receiver.Start());

    // ---- lifecycle (loop thread) ----

    private void BeginAbortiveClose() => BeginClose(_abortReason, abortive: true);

    /// <summary>The receiver or the sender reached its end: close gracefully once both have.</summary>
    internal void OnDirectionEnded()
    {
        if (_receiver.Ended && _sender.Ended)
        {
            BeginClose(null, abortive: false);
        }
    }

    /// <summary>Receiving or sending failed (or a handler threw): close abortively, so the peer cannot take the stream for complete.</summary>
    internal void Fail(Exception? reason) => BeginClose(reason, abortive: true);

    /// <summary>The peer's FIN (<paramref name="reset"/> false) or reset arrived: tell the registered callback once.</summary>
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

    // Closing: cancel each request in flight (by user_data), wait for each final CQE, then close through the ring, so the fd number
    // cannot be reused while a request on it may still run. Then tell the application. Zero-copy notifications are not
    // waited for: they may come minutes later (unacknowledged data keeps the kernel's hold on the memory until the peer
    // acknowledges it or goes away), so only the memory waits: the pins and the handle are freed after the last one.
    private unsafe void BeginClose(Exception? reason, bool abortive)
    {
        if (_state != ConnectionState.Open)
        {
            return;
        }
        MoveTo(ConnectionState.Cancelling);
        _abortiveClose = abortive;
        if (abortive && (_abortRequested != 0 ? _abortWithReset : _settings.AbortWithReset))
        {
            // SO_LINGER {on, 0}: close sends RST and drops unsent data, as Kestrel's Sockets transport does on abort.
            Libc.linger linger = new() { l_onoff = 1, l_linger = 0 };
            _ = Libc.setsockopt(_fd, Libc.SOL_SOCKET, Libc.SO_LINGER, &linger, (uint)sizeof(Libc.linger));
        }
        _receiver.OnClosing(reason);
        _sender.OnClosing();
        if (_owner.InFlight > _sender.NotificationsPending)
        {
            // What is left in flight then (these cancels, an earlier one) ends by itself; the last final CQE closes the fd.
            CancelForClose();
        }
        else
        {
            SubmitClose();
        }
    }

    /// <summary>After each final completion: close the fd once only notifications remain in flight; finish once it is closed.</summary>
    internal void CheckCloseProgress()
    {
        if (_state == ConnectionState.Cancelling && _owner.InFlight == _sender.NotificationsPending)
        {
            SubmitClose();
        }
        else if (_state == ConnectionState.FdClosed)
        {
            MoveTo(ConnectionState.Closed);
            OnClosed();
            _owner.Release(); // frees the handle now, or after the last notification (OnFreed)
        }
    }

    // A cancel the loop had no SQE for (the SQ stayed full after an early submit) is tried again next iteration, or the
    // close would wait for ever; cancelling a request twice is harmless (the second finds nothing).
    private void CancelForClose()
    {
        if (!(_receiver.CancelForClose() & _sender.CancelForClose()))
        {
            RetryOnLoop(static c => c.CancelForClose());
        }
    }

    private void SubmitClose()
    {
        MoveTo(ConnectionState.ClosingFd);
        ReleaseSocket();
        SubmitCloseRequest();
    }

    private unsafe void SubmitCloseRequest()
    {
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Close);
        if (sqe == null)
        {
            RetryOnLoop(static c => c.SubmitCloseRequest());
            return;
        }
        sqe->opcode = IORING_OP_CLOSE;
        sqe->fd = _fd;
    }

    private void RetryOnLoop(Action<IoUringConnection> retry) => _owner.Loop.RetryNextIteration(this, retry);

    internal void OnFdClosed() => MoveTo(ConnectionState.FdClosed);

    /// <summary>
    /// Cancels this connection's request whose user_data is <paramref name="userData"/> (found by hash: no walk). False
    /// when the loop had no SQE for it (reported).
    /// </summary>
    internal unsafe bool CancelRequest(ulong userData)
    {
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Cancel);
        if (sqe == null)
        {
            return false;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = userData;
        return true;
    }

    /// <summary>The fd is closed and no request but zero-copy notifications is in flight: the connection is closed.</summary>
    private void OnClosed()
    {
        _settings.Registry?.Remove(this);
        _receiver.Input.CompleteWriter(null);
        // Before Closed completes: whoever saw Closed complete and asks for ConnectionClosed gets a cancelled token.
        Interlocked.Exchange(ref _closedSignalled, 1); // full fence: published before the token source is read
        ThreadPool.UnsafeQueueUserWorkItem(_owner, preferLocal: false); // runs SignalClosed (no work item allocated per close)
    }

    /// <summary>
    /// On the thread pool, once the connection has closed: completes <see cref="Closed"/> (its awaiters continue here:
    /// <see cref="DisposeAsync"/>'s caller), then cancels <see cref="ConnectionClosed"/> (its callbacks run here, and
    /// may block on Closed). The network's disposal waits for this (<see cref="ConnectionRegistry.WhenClosedSignalled"/>).
    /// </summary>
    internal void SignalClosed()
    {
        ConnectionRegistry? registry = _settings.Registry;
        registry?.BeginClosedSignal(this);
        try
        {
            _closed.TrySetResult();
            if (Volatile.Read(ref _closedTokenSource) is { } source)
            {
                CancelClosedToken(source);
            }
        }
        finally
        {
            registry?.EndClosedSignal(this);
        }
    }

    /// <summary>Cancels the ConnectionClosed source; a callback that throws is reported, never thrown at the thread pool.</summary>
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
    /// closed already (the caller then gets a cancelled token). The flag and the field are each written with a full
    /// fence before the other is read, so a source published as the connection closes is cancelled by one side or both.
    /// </summary>
    private CancellationTokenSource? CreateClosedTokenSource()
    {
        if (Volatile.Read(ref _closedSignalled) != 0)
        {
            return null;
        }
        var source = new CancellationTokenSource();
        if (Interlocked.CompareExchange(ref _closedTokenSource, source, null) is { } existing)
        {
            source.Dispose();
            return existing;
        }
        if (Volatile.Read(ref _closedSignalled) != 0)
        {
            // Closed meanwhile, maybe without seeing the source: cancel it on the thread pool, as SignalClosed would.
            ThreadPool.UnsafeQueueUserWorkItem(static s => s.Connection.CancelClosedToken(s.Source), (Connection: this, Source: source), preferLocal: false);
        }
        return source;
    }

    private void MoveTo(ConnectionState next)
    {
        Debug.Assert(next == _state + 1, $"illegal connection state change {_state} -> {next}");
        _state = next;
    }

    /// <summary>Runs <paramref name="action"/> (given this connection) on the loop thread: now if already there, else posted.</summary>
    private void ScheduleOnLoop(Action<object?> action)
    {
        if (_owner.Loop.IsOnLoopThread)
        {
            action(this);
            return;
        }
        try
        {
            _owner.Loop.Post(action, this);
        }
        catch (ObjectDisposedException)
        {
            // The loop stopped: it closed every connection on its way out.
        }
    }
}
