using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A UDP socket driven by an io_uring loop (<see cref="IoUringNetwork.BindUdp"/>): receive datagrams with their source
/// address, send datagrams to any address, or <see cref="Connect"/> it to one peer. Receiving and sending allocate
/// nothing per datagram once warmed up: sources go into a <see cref="SocketAddress"/> of yours, waiting operations are
/// pooled, and <see cref="ReceiveBatchAsync"/> hands over several datagrams per call.
/// </summary>
/// <remarks>
/// <para>The socket lives on one <see cref="EventLoop"/>. Receiving is one multishot RECVMSG that fills the socket's
/// own buffer ring (one whole datagram per buffer, up to <see cref="IoUringUdpOptions.MaxDatagramSize"/>); each
/// datagram is copied into the oldest waiting receive's buffer, or kept in a bounded queue
/// (<see cref="IoUringUdpOptions.ReceiveQueueCapacity"/>). A datagram longer than the buffer it lands in is cut and
/// reported (<see cref="DatagramResult.Truncated"/>).</para>
/// <para>Sending copies the datagram and completes at once (see <see cref="IoUringUdpOptions.MaxPendingSends"/>); the
/// loop sends all datagrams queued in an iteration with one io_uring_enter.</para>
/// <para>Errors the network reports later (ICMP: <see cref="SocketError.ConnectionRefused"/> on a connected socket
/// whose peer has no socket on that port) fail the next receive or send with a <see cref="SocketException"/>; the
/// socket stays usable. Waiting receives fail with <see cref="SocketError.OperationAborted"/> when the socket is
/// disposed.</para>
/// <para>Receive and send from any thread; continuations run on the thread pool, never on the loop.</para>
/// </remarks>
/// <example>
/// <code>
/// await using var network = new IoUringNetwork();
/// await using IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.Any, 5353));
/// var buffer = new byte[2048];
/// var from = new SocketAddress(AddressFamily.InterNetwork);
/// while (true)
/// {
///     DatagramResult received = await socket.ReceiveFromAsync(buffer, from);
///     await socket.SendToAsync(buffer.AsMemory(0, received.BytesReceived), from); // echo
/// }
/// </code>
/// </example>
[SupportedOSPlatform("linux")]
public sealed partial class IoUringUdpSocket : IAsyncDisposable
{
    private readonly Socket _socket; // owns the fd: disposed (closed) only after the last request on it ended
    private readonly UdpRingOwner _owner;
    private readonly UdpReceiver _receiver;
    private readonly UdpSender _sender;
    private readonly int _addressSize;
    private readonly bool _dualMode;
    private readonly Action<IoUringUdpSocket>? _onClosed;
    private readonly TaskCompletionSource _closed = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private SocketException? _pendingError;
    private int _disposing;
    private bool _closing;          // loop thread
    private bool _released;         // loop thread
    private EndPoint? _remoteEndPoint;

    /// <summary>Takes over the bound <paramref name="socket"/>, to receive on <paramref name="loop"/> once
    /// <see cref="Start()"/> has run.</summary>
    internal IoUringUdpSocket(EventLoop loop, Socket socket, IoUringUdpOptions options,
        Action<IoUringUdpSocket>? onClosed)
    {
        _socket = socket;
        _onClosed = onClosed;
        FileDescriptor = (int)socket.Handle;
        LocalEndPoint = socket.LocalEndPoint!;
        _dualMode = socket.AddressFamily == AddressFamily.InterNetworkV6 && socket.DualMode;
        _addressSize = SocketAddress.GetMaximumAddressSize(socket.AddressFamily);
        _owner = new UdpRingOwner(loop, this);
        _receiver = new UdpReceiver(this, _owner, FileDescriptor, options);
        _sender = new UdpSender(this, _owner, FileDescriptor, options.MaxPendingSends);
    }

    /// <summary>The loop this socket runs on.</summary>
    public EventLoop Loop => _owner.Loop;

    /// <summary>The bound local endpoint (port 0 resolved).</summary>
    public EndPoint LocalEndPoint { get; }

    /// <summary>The peer given to <see cref="Connect"/>, or null while unconnected.</summary>
    public EndPoint? RemoteEndPoint => Volatile.Read(ref _remoteEndPoint);

    /// <summary>The socket's file descriptor, valid until <see cref="Closed"/>. Do not close it.</summary>
    public int FileDescriptor { get; }

    /// <summary>Datagrams taken from the kernel so far (handed to receives, queued, or dropped).</summary>
    public long DatagramsReceived => _receiver.Received;

    /// <summary>Datagrams dropped because the receive queue was full (see
    /// <see cref="IoUringUdpOptions.ReceiveQueueCapacity"/>). The kernel's own drops (its socket buffer full) are not
    /// in this count.</summary>
    public long DatagramsDropped => _receiver.Dropped;

    /// <summary>Datagrams the kernel has sent so far.</summary>
    public long DatagramsSent => _sender.Sent;

    /// <summary>Receives that held a coalesced burst (UDP_GRO, <see cref="IoUringUdpOptions.ReceiveCoalesced"/>),
    /// split back into its datagrams (each counted in <see cref="DatagramsReceived"/>).</summary>
    public long CoalescedReceives => _receiver.CoalescedReceives;

    /// <summary>Completes when the socket is closed: every request on it ended and its fd released.</summary>
    public Task Closed => _closed.Task;

    internal UdpReceiver Receiver => _receiver;

    internal UdpSender Sender => _sender;

    internal bool IsDisposing => Volatile.Read(ref _disposing) != 0;

    /// <summary>Times the RECVMSG found every buffer of its group taken (ENOBUFS). Exact on the loop.</summary>
    internal long ReceiveExhaustions => _receiver.Exhaustions;

    /// <summary>
    /// Connects the socket to <paramref name="remoteEndPoint"/>: from then on it receives only that peer's datagrams,
    /// <see cref="SendAsync"/> sends to it, and the kernel reports ICMP errors for it (a refused port fails the next
    /// operation with <see cref="SocketError.ConnectionRefused"/>). Connecting again changes the peer.
    /// </summary>
    /// <exception cref="SocketException">The kernel refused the address.</exception>
    public void Connect(EndPoint remoteEndPoint)
    {
        ArgumentNullException.ThrowIfNull(remoteEndPoint);
        ObjectDisposedException.ThrowIf(IsDisposing, this);
        _socket.Connect(remoteEndPoint); // connect(2) of a datagram socket only records the peer: nothing goes out
        // From the kernel: Socket.RemoteEndPoint keeps the first peer of a socket connected again.
        Volatile.Write(ref _remoteEndPoint, SocketAddresses.GetRemote(FileDescriptor));
    }

    /// <summary>
    /// Closes the socket: waiting receives fail, the RECVMSG is cancelled, sends already queued still go out; completes
    /// when every request on the socket has ended and its fd is closed.
    /// </summary>
    public ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposing, 1) == 0)
        {
            if (Loop.IsOnLoopThread)
            {
                BeginClose();
            }
            else
            {
                try
                {
                    Loop.Post(static s => ((IoUringUdpSocket)s!).BeginClose(), this);
                }
                catch (ObjectDisposedException)
                {
                    // The loop stopped: it closed this socket on its way out.
                }
            }
        }
        return new ValueTask(_closed.Task);
    }

    internal void SetPendingError(SocketException error) => Volatile.Write(ref _pendingError, error);

    internal SocketException? TakePendingError()
        => Volatile.Read(ref _pendingError) is null ? null : Interlocked.Exchange(ref _pendingError, null);

    /// <summary>Starts receiving on the loop and waits for it; if the loop has stopped or is stopping, or the socket
    /// was closed first (the network's dispose), closes the socket and throws <see cref="ObjectDisposedException"/>.
    /// </summary>
    internal void Start()
    {
        if (Loop.IsOnLoopThread)
        {
            Start(null);
            return;
        }
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        try
        {
            Loop.PostAndWake(static s =>
            {
                var (socket, done) = ((IoUringUdpSocket, TaskCompletionSource))s!;
                socket.Start(done);
            }, (this, started));
        }
        catch (ObjectDisposedException)
        {
            // The loop has stopped: nothing of this socket reached it, nothing is in flight.
            Volatile.Write(ref _disposing, 1);
            ReleaseAndClose();
            throw;
        }
        started.Task.GetAwaiter().GetResult();
    }

    /// <summary>Arms the receive; on failure closes the socket (nothing is in flight yet). Loop thread.</summary>
    private void Start(TaskCompletionSource? done)
    {
        Debug.Assert(Loop.IsOnLoopThread, "the receive is started on the loop thread");
        try
        {
            // Closed before it started: the network's dispose (or the loop's stop) found it registered.
            ObjectDisposedException.ThrowIf(_closing, this);
            if (Loop.IsStopping)
            {
                throw new ObjectDisposedException(nameof(EventLoop), "The event loop is stopping.");
            }
            _receiver.Start();
        }
        catch (Exception ex)
        {
            BeginClose(); // releases what the start made and closes the fd
            if (done is null)
            {
                throw;
            }
            done.SetException(ex);
            return;
        }
        done?.SetResult();
    }

    /// <summary>Stops receiving and sending, then (<see cref="CheckCloseProgress"/>) waits for the last final CQE.
    /// </summary>
    internal void BeginClose()
    {
        Debug.Assert(Loop.IsOnLoopThread, "the close runs on the loop thread");
        if (_closing)
        {
            return;
        }
        _closing = true;
        Volatile.Write(ref _disposing, 1);
        _receiver.OnClosing();
        _sender.OnClosing();
        CheckCloseProgress();
    }

    /// <summary>After each final CQE: once closing and nothing is in flight, releases everything.</summary>
    internal void CheckCloseProgress()
    {
        Debug.Assert(Loop.IsOnLoopThread, "final CQEs run on the loop thread");
        if (!_closing || _released || _owner.InFlight != 0)
        {
            return;
        }
        ReleaseAndClose();
    }

    /// <summary>Nothing is in flight: frees the receive and send state, closes the fd, tells the network and the
    /// awaiters (the loop thread, or the starting thread when the loop had stopped).</summary>
    private void ReleaseAndClose()
    {
        Debug.Assert(!_released && _owner.InFlight == 0, "released twice, or with requests in flight");
        _released = true;
        _receiver.Release();
        _sender.Release();
        _socket.Dispose(); // no request on the fd can run any more: its number may be reused from here on
        _owner.Release();
        _onClosed?.Invoke(this);
        _closed.TrySetResult();
    }
}
