using System.Buffers;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A connected socket on an io_uring loop, as a pair of pipes: read what the peer sent from <see cref="Input"/>, write
/// what to send to <see cref="Output"/>.
/// </summary>
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
    // _closedTokenSource once closed with none made; shared, as nothing registers on it
    private static readonly CancellationTokenSource s_closedTokenSource = CreateCancelledSource();
    private CancellationTokenSource? _closedTokenSource; // made when ConnectionClosed is first asked for
    private int _closedSignalled;   // 1 once closed: a later first ConnectionClosed read gets a cancelled token
    // Completed on OnClosed's thread-pool item, so awaiters continue there inline. Also locks _socket, _fdReleased.
    private readonly TaskCompletionSource _closed = new();
    private ConnectionState _state; // loop thread
    // Read at start: later the fd number may be another socket's. IPEndPoint is mutable: the listener's is copied.
    private IPEndPoint? _listenerEndPoint;
    private EndPoint? _localEndPoint;
    private EndPoint? _remoteEndPoint;
    private InetSocketAddress _remoteAddress;
    private int _remoteAddressLength;
    private Exception? _abortReason;
    private int _abortRequested;
    private bool _abortWithReset;
    private bool _abortiveClose;
    // 0, FIN (1) or reset (2); see DeliverPeerClosed.
    private int _peerClosedKind;
    private Action<object?, bool>? _peerClosedCallback;
    private object? _peerClosedState;
    private int _peerClosedDelivered;

    // ConnectionRegistry's links, under its lock
    internal IoUringConnection? RegistryPrevious, RegistryNext;

    /// <summary>Closed completed and ConnectionClosed's callbacks ran (under the registry's lock).</summary>
    internal bool ClosedSignalEnded;

    internal ConnectionRegistry? Registry => _settings.Registry;

    // Each step only to the next (MoveTo asserts it); see BeginClose.
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
        // the loop's pool is registered with its ring: zero-copy sends use fixed buffers
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

    /// <summary>What the peer sent. Completes at the peer's FIN; reads fail with an <see cref="IOException"/> on reset
    /// or abort.</summary>
    public PipeReader Input => _receiver.Input;

    /// <summary>What to send. Completing it sends FIN after the data.</summary>
    /// <remarks>A <c>WriteAsync</c> of at least <see cref="IoUringNetworkOptions.MaxWriteBufferSize"/> bytes is sent
    /// from the caller's memory: leave it unchanged until the task completes, as with
    /// <c>Socket.SendAsync</c>.</remarks>
    public PipeWriter Output => _output;

    /// <summary>The loop this connection runs on.</summary>
    public EventLoop Loop => _owner.Loop;

    /// <summary>The local endpoint, read at start.</summary>
    public EndPoint? LocalEndPoint => Volatile.Read(ref _localEndPoint) ?? CopyListenerEndPoint();

    /// <summary>The peer's endpoint, read at start.</summary>
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

    /// <summary>Cancelled on the thread pool once the connection has closed and its fd is released.</summary>
    public CancellationToken ConnectionClosed
        => (Volatile.Read(ref _closedTokenSource) ?? CreateClosedTokenSource())?.Token
            ?? new CancellationToken(canceled: true);

    /// <summary>Completes on the thread pool when the connection has closed and its fd is released, before
    /// <see cref="ConnectionClosed"/> is cancelled.</summary>
    public Task Closed => _closed.Task;

    /// <summary>The socket's file descriptor, valid until <see cref="Closed"/>; do not close it. The number may be
    /// reused after close: for anything that may run late, use <see cref="Socket"/>.</summary>
    public int FileDescriptor => _fd;

    /// <summary>Bytes received from the peer so far.</summary>
    public long BytesReceived => _receiver.BytesReceived;

    /// <summary>Bytes sent to the peer so far.</summary>
    public long BytesSent => _sender.BytesSent;

    /// <summary>Sends made with SEND_ZC/SENDMSG_ZC.</summary>
    public int ZeroCopySends => _sender.ZeroCopySends;

    /// <summary>True once the connection went back to plain sends because the kernel copied or refused a zero-copy
    /// send.</summary>
    public bool ZeroCopyReverted => _sender.ZeroCopyReverted;

    internal ConnectionReceiver Receiver => _receiver;

    internal ConnectionSender Sender => _sender;

    /// <summary>The pool <see cref="Output"/> rents from.</summary>
    public MemoryPool<byte> MemoryPool { get; }

    internal ConnectionSettings Settings => _settings;

    internal bool IsClosing => _state != ConnectionState.Open;

    /// <summary>A <see cref="Stream"/> over the pipes; disposing it completes them but keeps the connection.</summary>
    public Stream AsStream() => new DuplexPipeStream(Input, Output);

    /// <summary>A <see cref="Stream"/> over the pipes. With <paramref name="ownsConnection"/>, disposing it also closes
    /// the connection without waiting: gracefully, or with RST if the peer has not taken the rest within 5
    /// seconds.</summary>
    public Stream AsStream(bool ownsConnection) => new DuplexPipeStream(Input, Output, ownsConnection ? this : null);

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
        // also while not receiving, so a reset is noticed
        _receiver.ArmHangUpPoll();
        _sender.Start();
    }

    /// <summary>Until the application takes the connection, its bytes wait in the kernel, costing no memory.</summary>
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
            // the loop stopped, closing every connection
        }
    }


    /// <summary>Calls <paramref name="callback"/> with <paramref name="state"/> and whether the peer reset, once the
    /// peer's FIN or reset arrives, even while nothing reads: on the loop thread, or at once. It must not block or
    /// throw. Register once.</summary>
    public void OnPeerClosed(Action<object?, bool> callback, object? state)
    {
        _peerClosedState = state;
        Interlocked.Exchange(ref _peerClosedCallback, callback); // full fence: published before the kind is read
        DeliverPeerClosed();
    }

    /// <summary>Calls <paramref name="callback"/> on the loop thread with <paramref name="state"/> and true when
    /// receiving pauses because the input pipe is full, false when it resumes. It must not block or throw. Register
    /// once.</summary>
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

    /// <summary>Thread pool, once closed: completes <see cref="Closed"/> before cancelling
    /// <see cref="ConnectionClosed"/>, whose callbacks may block on it.</summary>
    internal void SignalClosed()
    {
        Debug.Assert(_state == ConnectionState.Closed && Volatile.Read(ref _closedSignalled) == 1,
            $"closed signalled in state {_state}");
        ConnectionRegistry? registry = _settings.Registry;
        registry?.BeginClosedSignal(this);
        try
        {
            _closed.TrySetResult();
            // the stand-in or a racing reader's source wins: every source made is cancelled here
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
            // a callback threw (the others ran): report it, never throw at the thread pool
            _owner.Loop.ReportUnhandled(ex);
        }
    }

    /// <summary>Null once closed. Races <see cref="SignalClosed"/>'s stand-in in one exchange: every reader gets the
    /// winner.</summary>
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
