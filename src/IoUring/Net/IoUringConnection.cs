using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A connected socket driven by an io_uring loop, exposed as a pair of pipes: read what the peer sent from
/// <see cref="Input"/>, write what to send to <see cref="Output"/>.
/// </summary>
/// <remarks>
/// The connection lives on one <see cref="EventLoop"/>. Completing <see cref="Output"/> sends FIN after the data; the
/// peer's FIN completes <see cref="Input"/>, a peer reset fails its reads with an <see cref="IOException"/>.
/// <see cref="Abort(Exception?)"/> resets the connection (RST).
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
    // What _closedTokenSource holds once closed with no source made (shared, never disposed: nothing registered on it).
    private static readonly CancellationTokenSource s_closedTokenSource = CreateCancelledSource();
    private CancellationTokenSource? _closedTokenSource; // made when ConnectionClosed is first asked for
    private int _closedSignalled;   // 1 once closed: a first ConnectionClosed read from then on gets a cancelled token
    // Completed only on the thread-pool item OnClosed queues, so awaiters continue there inline (one hop per close).
    // Also the lock for _socket and _fdReleased.
    private readonly TaskCompletionSource _closed = new();
    private ConnectionState _state; // loop thread
    // Endpoints are made when first asked for; the addresses behind them are read at start (after close the fd number
    // may belong to another socket, and a reset peer has no address). IPEndPoint is mutable: the listener's is copied.
    private IPEndPoint? _listenerEndPoint;
    private EndPoint? _localEndPoint;
    private EndPoint? _remoteEndPoint;
    private InetSocketAddress _remoteAddress;
    private int _remoteAddressLength;
    private Exception? _abortReason;
    private int _abortRequested;
    private bool _abortWithReset;
    private bool _abortiveClose;
    // Peer-closed notification, registered from any thread without a post to the loop: 0, FIN (1) or reset (2).
    private int _peerClosedKind;
    private Action<object?, bool>? _peerClosedCallback;
    private object? _peerClosedState;
    private int _peerClosedDelivered;

    /// <summary>Links of the network's <see cref="ConnectionRegistry"/> (under its lock).</summary>
    internal IoUringConnection? RegistryPrevious, RegistryNext;

    /// <summary>Closed has completed and ConnectionClosed's callbacks have run (under the registry's lock).</summary>
    internal bool ClosedSignalEnded;

    internal ConnectionRegistry? Registry => _settings.Registry;

    // The lifecycle, each step only to the next (MoveTo asserts it). The fd number stays this connection's until
    // FdClosed, when no request on it can still run.
    private enum ConnectionState
    {
        Open,       // receiving and sending, each until its own end
        Cancelling, // every request on the fd cancelled; waiting for their final CQEs (not zero-copy notifications)
        ClosingFd,  // only notifications in flight: the handed-out Socket disposed, the CLOSE submitted
        FdClosed,   // the CLOSE completed
        Closed,     // the application told; the owner released (memory freed after the last notification)
    }

    internal IoUringConnection(EventLoop loop, int fd, bool isTcp, ConnectionSettings settings)
    {
        _fd = fd;
        _isTcp = isTcp;
        _settings = settings;
        _owner = new ConnectionRingOwner(loop, this);
        // The loop's pool's blocks are registered with its ring: large sends from them go zero-copy from fixed buffers.
        MemoryPool = settings.MemoryPool ?? loop.MemoryPool;
        // While sends go zero-copy, a flush sends from its own thread only below the threshold.
        long callerSendLimit = settings.CallerSends ? settings.ZeroCopySendThreshold - 1 : 0;
        _output = new ConnectionOutput(_owner, loop, MemoryPool, settings.OutputSegments,
            settings.MaxWriteBufferSize ?? 0, settings.UnsafePreferInlineScheduling, fd, callerSendLimit);
        _receiver = new ConnectionReceiver(this, _owner, fd, settings.MaxReadBufferSize,
            settings.UnsafePreferInlineScheduling, settings.Capabilities);
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

    /// <summary>The local endpoint (read when the connection started).</summary>
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
    /// Cancelled (on the thread pool, once) when the connection has closed and its fd is released (and
    /// <see cref="Socket"/>'s, if taken). Asked for after that, an already cancelled token.
    /// </summary>
    public CancellationToken ConnectionClosed
        => (Volatile.Read(ref _closedTokenSource) ?? CreateClosedTokenSource())?.Token
            ?? new CancellationToken(canceled: true);

    /// <summary>Completes when the connection has closed and its fd is released, on a thread-pool thread, just before
    /// <see cref="ConnectionClosed"/> is cancelled there.</summary>
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

    /// <summary>True once the connection went back to plain sends: the kernel copied a zero-copy send after all, or
    /// refused one (EINVAL).</summary>
    public bool ZeroCopyReverted => _sender.ZeroCopyReverted;

    internal ConnectionReceiver Receiver => _receiver;

    internal ConnectionSender Sender => _sender;

    /// <summary>The pool <see cref="Output"/> rents from: its loop's <see cref="EventLoop.MemoryPool"/>, unless the
    /// network was given one.</summary>
    public MemoryPool<byte> MemoryPool { get; }

    internal ConnectionSettings Settings => _settings;

    /// <summary>Closing has begun: no new receive or send is started.</summary>
    internal bool IsClosing => _state != ConnectionState.Open;

    /// <summary>A <see cref="Stream"/> over the two pipes. Disposing it completes them but does not close the
    /// connection.</summary>
    public Stream AsStream() => new DuplexPipeStream(Input, Output);

    /// <summary>
    /// A <see cref="Stream"/> over the two pipes. With <paramref name="ownsConnection"/> disposing it also closes the
    /// connection without waiting, as a NetworkStream that owns its socket does: gracefully (the rest of the output,
    /// then FIN), or with RST if the peer has not taken it within 5 seconds, so its fd and buffers are released.
    /// </summary>
    public Stream AsStream(bool ownsConnection) => new DuplexPipeStream(Input, Output, ownsConnection ? this : null);

    /// <param name="noDelayInherited">Accepted from a listener with TCP_NODELAY set (inherited).</param>
    /// <param name="receive">Start receiving now; else when the application takes it (<see cref="StartReceiving"/>).
    /// </param>
    /// <param name="listenerEndPoint">The listener's single bound endpoint (shared, copied when first asked for), or
    /// null to read it.</param>
    internal void Start(bool noDelayInherited = false, bool receive = true, IPEndPoint? listenerEndPoint = null)
    {
        _owner.Loop.AssertOnLoopThread();
        if (_settings.NoDelay && _isTcp && !noDelayInherited)
        {
            _ = Libc.SetIntOption(_fd, Libc.IPPROTO_TCP, Libc.TCP_NODELAY, 1);
        }
        _settings.Registry?.Add(this);
        _listenerEndPoint = listenerEndPoint;
        _localEndPoint = listenerEndPoint is null ? SocketAddresses.GetLocal(_fd) : null;
        _remoteAddressLength = SocketAddresses.ReadRemote(_fd, ref _remoteAddress, out _remoteEndPoint);
        if (receive)
        {
            _receiver.Start();
        }
        // also before the application takes the connection, so a reset then is noticed
        _receiver.ArmHangUpPoll();
        _sender.Start();
    }

    /// <summary>Starts receiving once the application accepted the connection: until then its bytes wait in the kernel,
    /// costing no receive memory.</summary>
    internal void StartReceiving() => ScheduleOnLoop(static c => ((IoUringConnection)c!)._receiver.Start());

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


    /// <summary>
    /// Calls <paramref name="callback"/> once when the peer's FIN or reset is received (true for a reset), also while
    /// the application is not reading: on the loop thread, or at once if that already happened. For transports that
    /// must tell their server the client has gone (Kestrel's ConnectionClosed). Register once.
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
    /// pipe is full) and resumes (false), e.g. to log it. Register once.
    /// </summary>
    /// <param name="callback">Called with <paramref name="state"/> and whether receiving paused. It must not block or
    /// throw.</param>
    /// <param name="state">Passed to <paramref name="callback"/>.</param>
    public void OnBackpressure(Action<object?, bool> callback, object? state)
        => ScheduleOnLoop(_ => _receiver.SetBackpressureCallback(callback, state));

    internal void NotifyPeerClosed(bool reset)
    {
        _owner.Loop.AssertOnLoopThread();
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
    /// On the thread pool, once closed: completes <see cref="Closed"/> (awaiters continue here), then cancels
    /// <see cref="ConnectionClosed"/> (callbacks run here, and may block on Closed). The network's disposal waits for
    /// this (<see cref="ConnectionRegistry.WhenClosedSignalled"/>).
    /// </summary>
    internal void SignalClosed()
    {
        Debug.Assert(_state == ConnectionState.Closed && Volatile.Read(ref _closedSignalled) == 1,
            $"closed signalled in state {_state}");
        ConnectionRegistry? registry = _settings.Registry;
        registry?.BeginClosedSignal(this);
        try
        {
            _closed.TrySetResult();
            // The stand-in or a racing reader's source wins the exchange: every source made is cancelled here.
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

    private void CancelClosedToken(CancellationTokenSource source)
    {
        try
        {
            source.Cancel();
        }
        catch (Exception ex)
        {
            // A callback threw (the others ran first): reported, never thrown at the thread pool.
            _owner.Loop.ReportUnhandled(ex);
        }
    }

    /// <summary>
    /// The first <see cref="ConnectionClosed"/> read: the new source, or null once closed (a cancelled token then). It
    /// races <see cref="SignalClosed"/>'s stand-in in one exchange: the winner is what every reader gets.
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
