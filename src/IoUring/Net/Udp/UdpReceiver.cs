using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// The receiving half of an <see cref="IoUringUdpSocket"/>: one multishot RECVMSG that selects buffers from the
/// socket's own provided-buffer group (each buffer holds the io_uring_recvmsg_out header, the source address and one
/// whole datagram of up to <see cref="IoUringUdpOptions.MaxDatagramSize"/>). Each datagram is copied straight into the
/// oldest waiting receive's buffer, or else into a bounded queue of copies; the ring buffer goes back to the kernel at
/// once.
/// </summary>
/// <remarks>
/// <para>Threads: the RECVMSG, its completions and the arming state belong to the loop thread; receives are asked for
/// from any thread. The queue, the waiting receives and the operation pool are guarded by one lock, held for a copy at
/// most.</para>
/// <para>A full queue stops the RECVMSG (it is cancelled and not re-armed) until receives have taken half of the queue:
/// the kernel's socket buffer then holds further datagrams, and drops new ones when it is full, as for any UDP socket.
/// The datagrams already on their way when the queue filled are dropped too (the newest: the kernel's own policy, and
/// the order of the rest is kept) and counted (<see cref="Dropped"/>).</para>
/// <para>Errors the kernel reports through the socket (ICMP port unreachable: ECONNREFUSED on a connected socket, and
/// the like) end the RECVMSG; the error goes to the oldest waiting receive, or else to the socket's next operation,
/// and the RECVMSG is re-armed: the socket stays usable.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe partial class UdpReceiver
{
    private readonly IoUringUdpSocket _socket;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly IoUringUdpOptions _options; // the caller's, who may change it later: read at start only
    private int _largestDatagram;                 // MaxDatagramSize, read at start
    private readonly bool _reportsLocalAddresses;
    private readonly Lock _gate = new();
    private readonly DatagramQueue _queue;
    private readonly Stack<UdpReceiveOperation> _pool = new();

    /// <summary>Receive operations made so far (under the lock; for tests: a receive loop needs one).</summary>
    internal int OperationsCreated { get; private set; }
    private UdpReceiveOperation? _firstWaiting, _lastWaiting; // waiting receives, oldest first
    // a batch completing on the thread pool, still taking datagrams until it runs
    private UdpReceiveOperation? _filling;
    // under the lock: the RECVMSG was stopped for a full queue; the first receive to make room resumes it
    private bool _queueFull;
    private bool _closed;                   // under the lock: no new receive waits

    // Loop thread only.
    private ReceiveBuffers? _buffers;
    // the RECVMSG's msghdr (sizes of the name and control areas), then a scratch name area
    private Libc.msghdr* _message;
    // set at start: the control room in each buffer (coalesced receives, local addresses), else 0
    private int _controlSpace;
    private bool _coalescing;           // set at start: the kernel took UDP_GRO
    private LocalAddressFormat _localFormat;
    private long _coalescedReceives;
    private bool _armed;
    private bool _paused;
    private bool _backingOff;
    private bool _closing;
    private int _exhaustionMark = -1;
    private long _received;
    private long _dropped;

    public UdpReceiver(IoUringUdpSocket socket, RingOwner owner, int fd, IoUringUdpOptions options)
    {
        _socket = socket;
        _owner = owner;
        _fd = fd;
        _options = options;
        _reportsLocalAddresses = options.ReceiveLocalAddress; // as the socket's check of ReceiveMessageFromAsync
        _queue = new DatagramQueue(options.ReceiveQueueCapacity);
    }

    public long Received => Volatile.Read(ref _received);

    public long Dropped => Volatile.Read(ref _dropped);

    /// <summary>Receives that held a coalesced burst of several datagrams (UDP_GRO), each split back out.</summary>
    public long CoalescedReceives => Volatile.Read(ref _coalescedReceives);

    /// <summary>Whether the kernel took UDP_GRO for this socket (see <see
    /// cref="IoUringUdpOptions.ReceiveCoalesced"/>).</summary>
    public bool IsCoalescing => _coalescing;

    /// <summary>Datagrams come with their local address (<see cref="IoUringUdpOptions.ReceiveLocalAddress"/> as the
    /// socket was bound with).</summary>
    public bool ReportsLocalAddresses => _reportsLocalAddresses;

    public long Exhaustions => _buffers?.Exhaustions ?? 0;


    /// <summary>Registers the socket's buffer group and arms the RECVMSG. Loop thread.</summary>
    public void Start()
    {
        // Coalesced receives: the kernel reports each burst's segment size in a control message after the name, and a
        // burst takes up to 64 KiB whatever the largest datagram is. Without UDP_GRO (refused) datagrams come one by
        // one, as they would anyway.
        if (_options.ReceiveCoalesced && Libc.SetIntOption(_fd, Libc.SOL_UDP, Libc.UDP_GRO, 1) == 0)
        {
            _coalescing = true;
            _controlSpace = ControlMessages.SegmentSizeSpace;
        }
        if (_reportsLocalAddresses)
        {
            EnableLocalAddresses();
        }
        _largestDatagram = _options.MaxDatagramSize;
        int payloadRoom = _coalescing ? Math.Max(_largestDatagram, Datagrams.LargestCoalesced) : _largestDatagram;
        _buffers = new ReceiveBuffers(_owner.Loop.Ring, _options.ReceiveBufferCount,
            Datagrams.PayloadOffset + _controlSpace + payloadRoom);
        _owner.OwnReceiveBuffers = _buffers;
        _owner.Loop.AddOwnerReceiveBuffers(_buffers);
        // The kernel reads only the name and control sizes of a multishot RECVMSG's msghdr (and needs msg_name non-null
        // for the name to be reported at all): it writes the name into each buffer, after the header.
        _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + Datagrams.NameSpace));
        _message->msg_name = _message + 1;
        _message->msg_namelen = Datagrams.NameSpace;
        _message->msg_controllen = (nuint)_controlSpace;
        MaybeRearm();
    }

    /// <summary>Asks the kernel for each datagram's local address (IPV6_RECVPKTINFO on an IPv6 socket, which reports
    /// a dual-mode socket's IPv4 datagrams too, IPv4-mapped; IP_PKTINFO on an IPv4 one).</summary>
    private void EnableLocalAddresses()
    {
        var local = (IPEndPoint)_socket.LocalEndPoint;
        bool ipv6 = local.AddressFamily == AddressFamily.InterNetworkV6;
        int result = ipv6
            ? Libc.SetIntOption(_fd, Libc.SOL_IPV6, Libc.IPV6_RECVPKTINFO, 1)
            : Libc.SetIntOption(_fd, Libc.SOL_IP, Libc.IP_PKTINFO, 1);
        if (result != 0)
        {
            throw SocketErrors.FromErrno(Marshal.GetLastPInvokeError());
        }
        _localFormat = new LocalAddressFormat(ipv6, local.Port);
        _controlSpace += ControlMessages.LocalAddressSpace;
    }

    /// <summary>The socket is closing: waiting receives fail, the RECVMSG is cancelled. Loop thread.</summary>
    public void OnClosing()
    {
        _closing = true;
        UdpReceiveOperation? waiting;
        lock (_gate)
        {
            _closed = true;
            waiting = _firstWaiting;
            _firstWaiting = _lastWaiting = null;
            for (UdpReceiveOperation? operation = waiting; operation is not null; operation = operation.Next)
            {
                operation.Completed = true;
            }
        }
        while (waiting is not null)
        {
            UdpReceiveOperation? next = waiting.Next;
            waiting.Previous = waiting.Next = null;
            waiting.CompleteLater(default, new SocketException((int)SocketError.OperationAborted));
            waiting = next;
        }
        CancelReceive();
    }

    /// <summary>After the last request on the socket ended: the buffer group and the msghdr go. Loop thread.</summary>
    public void Release()
    {
        if (_buffers is not null)
        {
            _owner.OwnReceiveBuffers = null;
            _owner.Loop.RemoveOwnerReceiveBuffers(_buffers);
            _buffers.Dispose();
            _buffers = null;
        }
        NativeMemory.Free(_message);
        _message = null;
    }
}
