using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Threading.Tasks.Sources;
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
/// that takes buffers from the loop's buffer ring; the bytes are copied into <see cref="Input"/> and the buffer goes
/// back at once. Sending reads <see cref="Output"/> on the loop and sends every readable segment in one SEND/SENDMSG.</para>
/// <para>Completing <see cref="Output"/> sends FIN after the data. When the peer's FIN arrives, <see cref="Input"/>
/// completes. A peer reset fails <see cref="Input"/>'s reads with an <see cref="IOException"/> (the Kestrel
/// transport turns it into ConnectionResetException). <see cref="Abort(Exception?)"/> resets the connection (RST).</para>
/// </remarks>
public sealed partial class IoUringConnection : IDuplexPipe, IAsyncDisposable, IValueTaskSource<int>
{
    private const uint KindReceive = 1;
    private const uint KindCancel = 2; // ASYNC_CANCEL of the receive, or of everything at close
    private const uint KindSend = 3;
    private const uint KindReceiveBackoff = 4;
    private const uint KindHangUpPoll = 5;
    private const uint KindClose = 6;
    private const uint KindSendZeroCopy = 7;

    private readonly Owner _owner;
    private readonly ConnectionSettings _settings;
    private readonly int _fd;
    private readonly bool _isTcp;
    private readonly Pipe _input;
    private readonly Pipe _output;
    private readonly CancellationTokenSource _closedTokenSource = new();
    private readonly TaskCompletionSource _closed = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private EndPoint? _localEndPoint;
    private EndPoint? _remoteEndPoint;
    private Exception? _abortReason;
    private int _abortRequested;
    private bool _abortWithReset;
    // The peer-closed notification, registered from any thread without a post to the loop (one per accepted
    // connection under Kestrel): 0 until the peer's FIN (1) or reset (2) arrived, set by the loop.
    private int _peerClosedKind;
    private Action<object?, bool>? _peerClosedCallback;
    private object? _peerClosedState;
    private int _peerClosedDelivered;
    private (Action<object?, bool>? Callback, object? State) _backpressureCallback;

    internal IoUringConnection(EventLoop loop, int fd, bool isTcp, ConnectionSettings settings)
    {
        _fd = fd;
        _isTcp = isTcp;
        _settings = settings;
        _owner = new Owner(loop, this);
        PipeScheduler appScheduler = settings.UnsafePreferInlineScheduling ? PipeScheduler.Inline : PipeScheduler.ThreadPool;
        long maxRead = settings.MaxReadBufferSize ?? 0;
        long maxWrite = settings.MaxWriteBufferSize ?? 0;
        // Segments as large as the pool's blocks (a pipe asking for more than a pool's block size gets unpooled arrays).
        int segmentSize = Math.Min(PinnedBlockMemoryPool.BlockSize, settings.MemoryPool.MaxBufferSize);
        // The loop writes Input and reads Output; the application's continuations run on its own scheduler.
        _input = new Pipe(new PipeOptions(settings.MemoryPool, appScheduler, loop, maxRead, maxRead / 2, segmentSize, useSynchronizationContext: false));
        _output = new Pipe(new PipeOptions(settings.MemoryPool, loop, appScheduler, maxWrite, maxWrite / 2, segmentSize, useSynchronizationContext: false));
        _onFlushCompleted = OnInputFlushCompleted;
        InitializeZeroCopy();
    }

    /// <summary>What the peer sent. Completes at the peer's FIN; fails on reset or abort.</summary>
    public PipeReader Input => _input.Reader;

    /// <summary>What to send. Complete it to send FIN after the data.</summary>
    public PipeWriter Output => _output.Writer;

    /// <summary>The loop this connection runs on.</summary>
    public EventLoop Loop => _owner.Loop;

    /// <summary>The local endpoint (read when the connection started: the fd number may belong to another socket after close).</summary>
    public EndPoint? LocalEndPoint => _localEndPoint;

    /// <summary>The peer's endpoint (read when the connection started).</summary>
    public EndPoint? RemoteEndPoint => _remoteEndPoint;

    /// <summary>Cancelled (on the thread pool, once) when the connection has closed and its fd is released (and <see cref="Socket"/>'s, if taken).</summary>
    public CancellationToken ConnectionClosed => _closedTokenSource.Token;

    /// <summary>Completes when the connection has closed and its fd is released.</summary>
    public Task Closed => _closed.Task;

    /// <summary>
    /// The socket's file descriptor, valid until <see cref="Closed"/>. Do not close it. After close the number may
    /// belong to another socket: for anything that may run late, use <see cref="Socket"/>.
    /// </summary>
    public int Handle => _fd;

    /// <summary>Bytes received from the peer so far.</summary>
    public long BytesReceived => Volatile.Read(ref _bytesReceived);

    /// <summary>Bytes sent to the peer so far.</summary>
    public long BytesSent => Volatile.Read(ref _bytesSent);

    /// <summary>A <see cref="Stream"/> over the two pipes. Disposing it completes them but does not close the connection.</summary>
    public Stream AsStream() => new DuplexPipeStream(Input, Output);

    /// <summary>
    /// Closes the connection abortively: pending reads fail with <paramref name="reason"/>, unsent data is dropped and
    /// the peer gets RST (unless <see cref="IoUringNetworkOptions.AbortWithReset"/> is false). The first reason wins.
    /// </summary>
    public void Abort(Exception? reason = null) => Abort(reason, _settings.AbortWithReset);

    /// <summary>As <see cref="Abort(Exception?)"/>, choosing per call whether the peer gets RST (<paramref name="reset"/>) or FIN.</summary>
    public void Abort(Exception? reason, bool reset)
    {
        if (Interlocked.Exchange(ref _abortRequested, 1) != 0)
        {
            return;
        }
        _abortReason = reason ?? _settings.CreateAbortedException("The connection was aborted by the application.");
        _abortWithReset = reset;
        ScheduleOnLoop(static c => c.BeginClose(c._abortReason, abortive: true));
    }

    /// <summary>
    /// Calls <paramref name="callback"/> once when the peer's FIN or reset is received (true for a reset) — also while
    /// the application is not reading — on the loop thread, or at once on the calling thread if that already happened.
    /// For transports that must tell their server the client has gone (Kestrel's ConnectionClosed). Register once.
    /// </summary>
    internal void OnPeerClosed(Action<object?, bool> callback, object? state)
    {
        _peerClosedState = state;
        Interlocked.Exchange(ref _peerClosedCallback, callback); // full fence: published before the kind is read
        DeliverPeerClosed();
    }

    /// <summary>
    /// Calls <paramref name="callback"/> on the loop thread whenever receiving pauses for backpressure (true: the input
    /// pipe is full) and resumes (false), so a transport can log it (Kestrel's Pause/Resume events).
    /// </summary>
    internal void OnBackpressure(Action<object?, bool> callback, object? state)
        => ScheduleOnLoop(c => c._backpressureCallback = (callback, state));

    private void RaiseBackpressure(bool paused)
    {
        if (_backpressureCallback is var (callback, state) && callback is not null)
        {
            callback(state, paused);
        }
    }

    private void RaisePeerClosed(bool reset)
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
    /// Ends the connection gracefully and waits until its fd is released: completes <see cref="Input"/> and
    /// <see cref="Output"/> if the application has not, sends what is left of the output followed by FIN, then closes.
    /// A peer that never reads keeps it waiting: use <see cref="Abort(Exception?)"/> to cut it off.
    /// </summary>
    public async ValueTask DisposeAsync()
    {
        await _input.Reader.CompleteAsync().ConfigureAwait(false);
        await _output.Writer.CompleteAsync().ConfigureAwait(false);
        ScheduleOnLoop(static c => c.OnInputReaderGone());
        await _closed.Task.ConfigureAwait(false);
    }

    /// <param name="noDelayInherited">Accepted from a listener with TCP_NODELAY set, which the socket inherited.</param>
    /// <param name="receive">Start receiving now; an accepted connection starts when the application takes it (<see cref="StartReceiving"/>).</param>
    internal void Start(bool noDelayInherited = false, bool receive = true)
    {
        _owner.Loop.AssertOnLoopThread();
        if (_settings.NoDelay && _isTcp && !noDelayInherited)
        {
            _ = Libc.SetIntOption(_fd, Libc.IPPROTO_TCP, Libc.TCP_NODELAY, 1);
        }
        _settings.Registry?.Add(this);
        // Read now: after close the fd number may belong to another socket.
        _localEndPoint = SocketAddresses.GetLocal(_fd);
        _remoteEndPoint = SocketAddresses.GetRemote(_fd);
        if (receive)
        {
            ArmReceive();
        }
        ArmHangUpPoll(); // also for a connection not accepted yet: a reset before the application takes it is noticed
        _ = SendLoopAsync();
    }

    /// <summary>
    /// Starts receiving a connection the listener held back until the application accepted it, so that connections
    /// nobody has accepted yet cost no receive memory (their bytes wait in the kernel, as with an accept backlog).
    /// </summary>
    internal void StartReceiving() => ScheduleOnLoop(static c => c.MaybeRearmReceive());

    private void ScheduleOnLoop(Action<IoUringConnection> action)
    {
        if (_owner.Loop.IsOnLoopThread)
        {
            action(this);
            return;
        }
        try
        {
            _owner.Loop.Post(static s => { var (c, a) = ((IoUringConnection, Action<IoUringConnection>))s!; a(c); }, (this, action));
        }
        catch (ObjectDisposedException)
        {
            // The loop stopped: it closed every connection on its way out.
        }
    }

    private sealed class Owner(EventLoop loop, IoUringConnection connection) : RingOwner(loop)
    {
        internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
        {
            switch (kind)
            {
                case KindReceive: connection.OnReceive(result, flags); break;
                case KindSend: connection.OnSendCompleted(result); break;
                case KindReceiveBackoff: connection.OnReceiveBackoffEnded(); break;
                case KindHangUpPoll: connection.OnHangUp(result); break;
                case KindClose: connection.OnCloseCompleted(); break;
                case KindSendZeroCopy: connection.OnZeroCopySendCompleted(result, flags, UserData.Slot(userData)); break;
                default: break; // cancel requests: their targets report for themselves
            }
        }

        internal override void HandleException(Exception exception)
        {
            Loop.ReportUnhandled(exception);
            connection.BeginClose(exception, abortive: true);
        }

        internal override void OnRequestFinished() => connection.CheckCloseProgress();

        internal override void OnFreed() => connection.OnFreed();
    }

    // IValueTaskSource<int>: the pending send's result; completed inline on the loop thread.
    int IValueTaskSource<int>.GetResult(short token) => _sendSource.GetResult(token);

    ValueTaskSourceStatus IValueTaskSource<int>.GetStatus(short token) => _sendSource.GetStatus(token);

    void IValueTaskSource<int>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _sendSource.OnCompleted(continuation, state, token, flags);
}
