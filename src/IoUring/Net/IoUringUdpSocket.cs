using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// A UDP socket on an io_uring loop (<see cref="IoUringNetwork.BindUdp"/>): receive datagrams with their source, send
/// to any address, or <see cref="Connect"/> to one peer. Once warm it allocates nothing per datagram.
/// </summary>
/// <remarks>Use it from any thread; continuations run on the thread pool.</remarks>
/// <example>
/// <code>
/// var from = new SocketAddress(AddressFamily.InterNetwork); // reuse it: no allocation per datagram
/// DatagramResult received = await socket.ReceiveFromAsync(buffer, from);
/// await socket.SendToAsync(buffer.AsMemory(0, received.BytesReceived), from);
/// </code>
/// </example>
[SupportedOSPlatform("linux")]
public sealed partial class IoUringUdpSocket : IAsyncDisposable
{
    private readonly Socket _socket; // owns the fd: closed only after the last request on it ended
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

    /// <summary>Datagrams taken from the kernel so far.</summary>
    public long DatagramsReceived => _receiver.Received;

    /// <summary>Datagrams dropped because the receive queue was full
    /// (<see cref="IoUringUdpOptions.ReceiveQueueCapacity"/>); the kernel's own drops are not counted.</summary>
    public long DatagramsDropped => _receiver.Dropped;

    /// <summary>Datagrams the kernel has sent so far.</summary>
    public long DatagramsSent => _sender.Sent;

    /// <summary>Receives that held a coalesced burst (<see cref="IoUringUdpOptions.ReceiveCoalesced"/>), split back
    /// into datagrams.</summary>
    public long CoalescedReceives => _receiver.CoalescedReceives;

    /// <summary>Completes when every request on the socket has ended and its fd is closed.</summary>
    public Task Closed => _closed.Task;

    internal UdpReceiver Receiver => _receiver;

    internal UdpSender Sender => _sender;

    internal bool IsDisposing => Volatile.Read(ref _disposing) != 0;

    /// <summary>Times the RECVMSG found every buffer taken (ENOBUFS).</summary>
    internal long ReceiveExhaustions => _receiver.Exhaustions;

    /// <summary>Connects the socket to <paramref name="remoteEndPoint"/>: it then receives only that peer's datagrams,
    /// and <see cref="SendAsync"/> sends to it. Connecting again changes the peer.</summary>
    /// <exception cref="SocketException">The kernel refused the address.</exception>
    public void Connect(EndPoint remoteEndPoint)
    {
        ArgumentNullException.ThrowIfNull(remoteEndPoint);
        ObjectDisposedException.ThrowIf(IsDisposing, this);
        _socket.Connect(remoteEndPoint); // only records the peer: nothing is sent
        // Read back: Socket.RemoteEndPoint keeps the first peer of a socket connected again.
        Volatile.Write(ref _remoteEndPoint, SocketAddresses.GetRemote(FileDescriptor));
    }

    /// <summary>Closes the socket: waiting receives fail, queued sends still go out. Completes when every request has
    /// ended and the fd is closed.</summary>
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
                    // the loop stopped, closing this socket
                }
            }
        }
        return new ValueTask(_closed.Task);
    }

    internal void SetPendingError(SocketException error) => Volatile.Write(ref _pendingError, error);

    internal SocketException? TakePendingError()
        => Volatile.Read(ref _pendingError) is null ? null : Interlocked.Exchange(ref _pendingError, null);

    /// <summary>Throws <see cref="ObjectDisposedException"/>, having closed the socket, if the loop is stopping or the
    /// socket was already closed.</summary>
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
            // the loop has stopped: nothing is in flight
            Volatile.Write(ref _disposing, 1);
            ReleaseAndClose();
            throw;
        }
        started.Task.GetAwaiter().GetResult();
    }

    private void Start(TaskCompletionSource? done)
    {
        Debug.Assert(Loop.IsOnLoopThread, "the receive is started on the loop thread");
        try
        {
            // the network's dispose or the loop's stop closed it first
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

    /// <summary>Called after each final CQE.</summary>
    internal void CheckCloseProgress()
    {
        Debug.Assert(Loop.IsOnLoopThread, "final CQEs run on the loop thread");
        if (!_closing || _released || _owner.InFlight != 0)
        {
            return;
        }
        ReleaseAndClose();
    }

    // On the loop thread, or on Start's thread when the loop had stopped.
    private void ReleaseAndClose()
    {
        Debug.Assert(!_released && _owner.InFlight == 0, "released twice, or with requests in flight");
        _released = true;
        _receiver.Release();
        _sender.Release();
        _socket.Dispose(); // no request on the fd can still run: its number may be reused from here on
        _owner.Release();
        _onClosed?.Invoke(this);
        _closed.TrySetResult();
    }
}
