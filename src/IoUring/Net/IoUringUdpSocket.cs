using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;
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
public sealed class IoUringUdpSocket : IAsyncDisposable
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

    /// <summary>Times the RECVMSG found every buffer of the socket's group taken (ENOBUFS) and was re-armed. Read on
    /// the loop, or approximately.</summary>
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
    /// Receives one datagram into <paramref name="buffer"/> and its source into <paramref name="remoteAddress"/> (which
    /// you can pass to <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/> to answer).
    /// </summary>
    /// <param name="buffer">Where the datagram goes; a longer one is cut and reported
    /// (<see cref="DatagramResult.Truncated"/>).</param>
    /// <param name="remoteAddress">Filled with the source address; its buffer must hold this socket's family's
    /// addresses (<see cref="SocketAddress.GetMaximumAddressSize"/>; on a dual-mode socket IPv4 sources come as
    /// IPv4-mapped IPv6).</param>
    /// <param name="cancellationToken">Cancels a wait for a datagram.</param>
    /// <exception cref="SocketException">An error the network reported for an earlier datagram (e.g.
    /// <see cref="SocketError.ConnectionRefused"/>), or <see cref="SocketError.OperationAborted"/>: the socket was
    /// disposed while waiting.</exception>
    /// <exception cref="ObjectDisposedException">The socket is disposed.</exception>
    public ValueTask<DatagramResult> ReceiveFromAsync(Memory<byte> buffer, SocketAddress remoteAddress,
        CancellationToken cancellationToken = default)
    {
        CheckRoom(remoteAddress);
        return _receiver.ReceiveAsync(buffer, remoteAddress, null, cancellationToken);
    }

    /// <summary>
    /// As <see cref="ReceiveFromAsync"/>, and the local address the datagram was sent to into
    /// <paramref name="localAddress"/>: for a socket bound to a wildcard address on a host with several, the address
    /// the peer used, to answer from (<see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, SocketAddress,
    /// CancellationToken)"/>). The interface it came in on is <see cref="DatagramResult.InterfaceIndex"/>.
    /// </summary>
    /// <param name="buffer">Where the datagram goes; a longer one is cut and reported.</param>
    /// <param name="remoteAddress">Filled with the source address, as with <see cref="ReceiveFromAsync"/>.</param>
    /// <param name="localAddress">Filled with the datagram's destination address and the socket's port, of the socket's
    /// family: on a dual-mode socket IPv4 ones come IPv4-mapped; an IPv6 link-local one names its interface in its
    /// scope id. For a broadcast or multicast datagram it is the broadcast or group address: answer those without a
    /// local address.</param>
    /// <param name="cancellationToken">Cancels a wait for a datagram.</param>
    /// <exception cref="InvalidOperationException">The socket does not report local addresses: set
    /// <see cref="IoUringUdpOptions.ReceiveLocalAddress"/>.</exception>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<DatagramResult> ReceiveMessageFromAsync(Memory<byte> buffer, SocketAddress remoteAddress,
        SocketAddress localAddress, CancellationToken cancellationToken = default)
    {
        CheckRoom(remoteAddress);
        CheckRoom(localAddress);
        if (!_receiver.ReportsLocalAddresses)
        {
            throw new InvalidOperationException(
                $"The socket does not report local addresses: set {nameof(IoUringUdpOptions)}." +
                $"{nameof(IoUringUdpOptions.ReceiveLocalAddress)}.");
        }
        return _receiver.ReceiveAsync(buffer, remoteAddress, localAddress, cancellationToken);
    }

    private void CheckRoom(SocketAddress address, [CallerArgumentExpression(nameof(address))] string? name = null)
    {
        ArgumentNullException.ThrowIfNull(address, name);
        if (address.Buffer.Length < _addressSize)
        {
            throw new ArgumentException(
                $"The socket address holds {address.Buffer.Length} bytes; this socket's addresses take " +
                $"{_addressSize}.", name);
        }
    }

    /// <summary>Receives one datagram into <paramref name="buffer"/> (on a connected socket: from its peer).</summary>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<DatagramResult> ReceiveAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
        => _receiver.ReceiveAsync(buffer, null, null, cancellationToken);

    /// <summary>
    /// Waits for at least one datagram, then fills <paramref name="batch"/> with as many as are there (up to its
    /// capacity): those queued, and those arriving until the continuation runs. Returns how many (also
    /// <see cref="UdpDatagramBatch.Count"/>).
    /// </summary>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<int> ReceiveBatchAsync(UdpDatagramBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return _receiver.ReceiveBatchAsync(batch, cancellationToken);
    }

    /// <summary>
    /// Sends <paramref name="buffer"/> as one datagram to <paramref name="remoteAddress"/>. The bytes are copied: the
    /// buffer is yours again when this returns, and the send normally completes at once.
    /// </summary>
    /// <returns>The datagram's length.</returns>
    /// <exception cref="SocketException">An error the network reported for an earlier datagram (e.g.
    /// <see cref="SocketError.ConnectionRefused"/>), the kernel's error for this one when the caller waited for it (see
    /// <see cref="IoUringUdpOptions.MaxPendingSends"/>), or <see cref="SocketError.MessageSize"/>: longer than a UDP
    /// datagram can be.</exception>
    /// <exception cref="ObjectDisposedException">The socket is disposed.</exception>
    // RS0026: the SendToAsync overloads differ in the destination's type, as Socket.SendToAsync's do, or add a source
    // address: no call is ambiguous.
#pragma warning disable RS0026
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, SocketAddress remoteAddress,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        return _sender.SendAsync(buffer, remoteAddress, null, cancellationToken);
    }

    /// <summary>
    /// As <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/>, leaving from
    /// <paramref name="localAddress"/> (IP_PKTINFO, IPV6_PKTINFO) rather than the address routing would choose:
    /// answer a datagram from the address it was sent to (<see cref="ReceiveMessageFromAsync"/>).
    /// </summary>
    /// <param name="buffer">The datagram.</param>
    /// <param name="remoteAddress">Where it goes.</param>
    /// <param name="localAddress">The source address: one of this host's, of the socket's family (on a dual-mode socket
    /// an IPv4 one IPv4-mapped); its port is ignored (the socket's is used); an IPv6 one's scope id, if any, is the
    /// interface to leave by. The unspecified address (0.0.0.0, ::) lets routing choose. An address the host does not
    /// have is refused by the kernel (IPv4: <see cref="SocketError.NetworkUnreachable"/>; IPv6:
    /// <see cref="SocketError.InvalidArgument"/>), an error of that send alone: reported to it if it waits, else to
    /// the socket's next send, never to receives.</param>
    /// <param name="cancellationToken">Cancels a send that waits for room.</param>
    /// <exception cref="ArgumentException"><paramref name="localAddress"/> is not of the socket's family.</exception>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, SocketAddress remoteAddress,
        SocketAddress localAddress, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckLocalAddress(localAddress);
        return _sender.SendAsync(buffer, remoteAddress, localAddress, cancellationToken);
    }

    private void CheckLocalAddress(SocketAddress localAddress)
    {
        ArgumentNullException.ThrowIfNull(localAddress);
        AddressFamily family = LocalEndPoint.AddressFamily;
        int size = family == AddressFamily.InterNetworkV6
            ? LocalAddressFormat.IPv6NameSize
            : LocalAddressFormat.IPv4NameSize;
        if (localAddress.Family != family || localAddress.Size < size)
        {
            throw new ArgumentException(
                $"The local address is {localAddress.Family} of {localAddress.Size} bytes; this socket sends from " +
                $"{family} addresses" + (_dualMode ? " (IPv4 ones IPv4-mapped)." : "."), nameof(localAddress));
        }
    }

    /// <summary>As <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/> to an endpoint
    /// (serialized on each call: keep a <see cref="SocketAddress"/> on hot paths).</summary>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, EndPoint remoteEndPoint,
        CancellationToken cancellationToken = default)
#pragma warning restore RS0026
    {
        ArgumentNullException.ThrowIfNull(remoteEndPoint);
        if (_dualMode && remoteEndPoint is IPEndPoint { AddressFamily: AddressFamily.InterNetwork } ipv4)
        {
            // as Socket.SendTo does on a dual-mode socket
            remoteEndPoint = new IPEndPoint(ipv4.Address.MapToIPv6(), ipv4.Port);
        }
        return _sender.SendAsync(buffer, remoteEndPoint.Serialize(), null, cancellationToken);
    }

    /// <summary>Sends <paramref name="buffer"/> as one datagram to the connected peer (see
    /// <see cref="Connect"/>).</summary>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default)
        => _sender.SendAsync(buffer, null, null, cancellationToken);

    /// <summary>The most datagrams one segmented send makes: the kernel's UDP_MAX_SEGMENTS (64; newer kernels take
    /// more, older ones refuse more).</summary>
    public const int MaxSegments = 64;

    /// <summary>
    /// Sends <paramref name="buffer"/> to <paramref name="remoteAddress"/> as datagrams of
    /// <paramref name="segmentSize"/> bytes each, the last one shorter if the length is not a multiple: with one
    /// SENDMSG carrying UDP_SEGMENT, which the kernel (or the network card) cuts into the datagrams (segmentation
    /// offload, GSO).
    /// Each arrives as a datagram of its own. The bytes are copied, as with
    /// <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/>.
    /// </summary>
    /// <remarks>
    /// <para>Where the kernel refuses to segment, the same bytes go one datagram per SENDMSG: the peer receives the
    /// same datagrams either way (a datagram above the route's MTU cut into IP fragments, unless the socket forbids
    /// fragmenting). <see cref="SegmentOffloads"/> counts the sends segmented by the kernel. Refusals are remembered,
    /// so that later sends skip the failing SENDMSG: EMSGSIZE (a segment larger than the route's MTU) and EINVAL (e.g.
    /// UDP checksums switched off) for that segment size and larger ones, for every destination, as the socket
    /// cannot tell which route refused; EIO (a device that cannot segment) for the whole socket, as quinn does: the
    /// kernel does not say which device refused, and an unconnected socket's destinations are usually reached
    /// through the same one.</para>
    /// <para>Going one by one, each datagram is sent once the previous one's SENDMSG completed, and later sends of the
    /// socket are not held back meanwhile: their datagrams may arrive between this send's (UDP keeps no order anyway;
    /// holding them would hold every send of the socket to one datagram per loop iteration).</para>
    /// <para>Over IPv4 one segmented send carries at most 65,507 bytes (IPv6: 65,527): more fails with
    /// <see cref="SocketError.MessageSize"/> and nothing is sent.</para>
    /// </remarks>
    /// <returns>The bytes sent: <paramref name="buffer"/>'s length; less when datagrams going one by one failed
    /// partway and the caller waited for the result (see <see cref="IoUringUdpOptions.MaxPendingSends"/>): as with
    /// sendmmsg(2), those before the failed one went, that one and the rest did not.</returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="segmentSize"/> is not 1 to
    /// <see cref="IoUringUdpOptions.LargestDatagram"/>, or the buffer makes more than <see cref="MaxSegments"/>
    /// datagrams.</exception>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    // RS0026: the overload with a source address adds a parameter: no call is ambiguous.
#pragma warning disable RS0026
    public ValueTask<int> SendSegmentsToAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        SocketAddress remoteAddress, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, remoteAddress, null, cancellationToken, segmentSize);
    }

    /// <summary>As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>,
    /// leaving from <paramref name="localAddress"/> (see <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress,
    /// SocketAddress, CancellationToken)"/>).</summary>
    /// <exception cref="ArgumentException"><paramref name="localAddress"/> is not of the socket's family.</exception>
    /// <inheritdoc cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"
    ///     path="/exception"/>
    public ValueTask<int> SendSegmentsToAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        SocketAddress remoteAddress, SocketAddress localAddress, CancellationToken cancellationToken = default)
#pragma warning restore RS0026
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckLocalAddress(localAddress);
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, remoteAddress, localAddress, cancellationToken, segmentSize);
    }

    /// <summary>As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>,
    /// to the connected peer (see <see cref="Connect"/>).</summary>
    /// <inheritdoc cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"
    ///     path="/exception"/>
    public ValueTask<int> SendSegmentsAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        CancellationToken cancellationToken = default)
    {
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, null, null, cancellationToken, segmentSize);
    }

    /// <summary>Segmented sends the kernel took with UDP_SEGMENT: one SENDMSG for all their datagrams (the rest went
    /// one datagram at a time; see
    /// <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>).</summary>
    public long SegmentOffloads => _sender.SegmentOffloads;

    private static void CheckSegments(int length, int segmentSize)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(segmentSize, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(segmentSize, IoUringUdpOptions.LargestDatagram);
        int segments = (length + segmentSize - 1) / segmentSize;
        if (segments > MaxSegments)
        {
            throw new ArgumentOutOfRangeException(nameof(segmentSize), segmentSize,
                $"{length} bytes in segments of {segmentSize} make {segments} datagrams; one send makes at most " +
                $"{MaxSegments}.");
        }
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

    // ---- errors for the next operation ----

    internal void SetPendingError(SocketException error) => Volatile.Write(ref _pendingError, error);

    internal SocketException? TakePendingError()
        => Volatile.Read(ref _pendingError) is null ? null : Interlocked.Exchange(ref _pendingError, null);

    // ---- lifecycle (loop thread) ----

    /// <summary>
    /// Starts receiving on the loop and waits for it. If the loop has stopped, is stopping, or the socket was closed
    /// first (the network's dispose), the socket is closed and this throws <see cref="ObjectDisposedException"/>.
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

    /// <summary>Closing: stop receiving and sending, then (<see cref="CheckCloseProgress"/>) wait for the last final
    /// CQE.</summary>
    internal void BeginClose()
    {
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

    /// <summary>After each final CQE: once closing and nothing is in flight, release everything and close the
    /// fd.</summary>
    internal void CheckCloseProgress()
    {
        if (!_closing || _released || _owner.InFlight != 0)
        {
            return;
        }
        ReleaseAndClose();
    }

    /// <summary>Nothing is in flight: frees the receive and send state, closes the fd, tells the network and the
    /// awaiters.</summary>
    private void ReleaseAndClose()
    {
        _released = true;
        _receiver.Release();
        _sender.Release();
        _socket.Dispose(); // no request on the fd can run any more: its number may be reused from here on
        _owner.Release();
        _onClosed?.Invoke(this);
        _closed.TrySetResult();
    }
}
