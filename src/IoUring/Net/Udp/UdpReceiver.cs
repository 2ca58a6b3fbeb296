using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The receiving half of an <see cref="IoUringUdpSocket"/>: one multishot RECVMSG on the socket's own buffer group,
/// each datagram handed to the <see cref="DatagramChannel"/>. Loop thread, except the counters and receive methods.
/// </summary>
/// <remarks>
/// A full queue pauses the RECVMSG until receives have taken half of it; meanwhile the socket buffer holds datagrams
/// and drops new ones when full, as for any UDP socket.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe class UdpReceiver
{
    private readonly IoUringUdpSocket _socket;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly IoUringUdpOptions _options; // the caller's: read at start only
    private readonly bool _reportsLocalAddresses;
    private readonly DatagramChannel _channel;
    private int _largestDatagram;                 // MaxDatagramSize, read at start
    private ReceiveBuffers? _buffers;
    private Libc.msghdr* _message;
    private int _controlSpace;          // per buffer: coalesced receives, local addresses
    private bool _coalescing;           // the kernel took UDP_GRO
    private LocalAddressFormat _localFormat;
    private long _coalescedReceives;
    private bool _armed;
    private bool _paused;               // for a full queue
    private bool _backingOff;           // a TIMEOUT is pending (or its SQE retried): nothing re-arms before it ends
    private bool _closing;
    private int _exhaustionMark = -1;
    private long _received;

    public UdpReceiver(IoUringUdpSocket socket, RingOwner owner, int fd, IoUringUdpOptions options)
    {
        _socket = socket;
        _owner = owner;
        _fd = fd;
        _options = options;
        _reportsLocalAddresses = options.ReceiveLocalAddress;
        _channel = new DatagramChannel(this, socket, owner, options.ReceiveQueueCapacity, _reportsLocalAddresses);
    }

    public long Received => Volatile.Read(ref _received);

    public long Dropped => _channel.Dropped;

    public long CoalescedReceives => Volatile.Read(ref _coalescedReceives);

    public bool IsCoalescing => _coalescing;

    public bool ReportsLocalAddresses => _reportsLocalAddresses;

    public long Exhaustions => _buffers?.Exhaustions ?? 0;

    internal int OperationsCreated => _channel.OperationsCreated;

    private bool OnLoopThread => _owner.Loop.IsOnLoopThread;

    public ValueTask<DatagramResult> ReceiveAsync(Memory<byte> buffer, SocketAddress? from, SocketAddress? local,
        CancellationToken cancellationToken)
        => _channel.ReceiveAsync(buffer, from, local, cancellationToken);

    public ValueTask<int> ReceiveBatchAsync(UdpDatagramBatch batch, CancellationToken cancellationToken)
        => _channel.ReceiveBatchAsync(batch, cancellationToken);

    public void Start()
    {
        Debug.Assert(OnLoopThread, "Start runs on the loop thread");
        Debug.Assert(_buffers is null && _message is null, "started twice");
        // With UDP_GRO each burst's segment size comes in a control message, and a burst takes up to 64 KiB whatever
        // the largest datagram.
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
        // A multishot RECVMSG's msghdr gives only the name and control sizes (msg_name must be non-null for the name
        // to be reported): the kernel writes both into each buffer, after the header.
        _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + Datagrams.NameSpace));
        _message->msg_name = _message + 1;
        _message->msg_namelen = Datagrams.NameSpace;
        _message->msg_controllen = (nuint)_controlSpace;
        MaybeRearm();
    }

    /// <summary>On a dual-mode socket, IPv4 datagrams report IPv4-mapped local addresses.</summary>
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

    public void OnClosing()
    {
        Debug.Assert(OnLoopThread, "OnClosing runs on the loop thread");
        _closing = true;
        _channel.Close();
        CancelReceive();
    }

    /// <summary>After the socket's last request ended, or the loop stopped.</summary>
    public void Release()
    {
        Debug.Assert(!_armed || _owner.Loop.IsStopping, "released while the RECVMSG may still write into its buffers");
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

    public void OnBackoffEnded()
    {
        Debug.Assert(_backingOff, "a back-off TIMEOUT ended that was not started");
        _backingOff = false;
        MaybeRearm();
    }

    private void Pause()
    {
        _paused = true;
        CancelReceive();
    }

    /// <summary>Receives took half of a full queue (scheduled by the channel).</summary>
    public void Resume()
    {
        Debug.Assert(OnLoopThread, "Resume runs on the loop thread");
        _paused = false;
        MaybeRearm();
    }

    private bool CanArm => !_armed && !_backingOff && !_paused && !_closing && !_owner.Loop.IsStopping;

    private void MaybeRearm()
    {
        Debug.Assert(OnLoopThread, "the RECVMSG is armed on the loop thread");
        if (!CanArm)
        {
            return;
        }
        Debug.Assert(_buffers is not null && _message is not null, "armed before Start or after Release");
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Receive);
        if (sqe == null)
        {
            BackOff(); // try again later rather than stay deaf
            return;
        }
        sqe->opcode = IORING_OP_RECVMSG;
        sqe->fd = _fd;
        // SAFETY: _message is freed only by Release, after the last request on the socket ended; the buffers it
        // selects belong to _buffers, disposed there too.
        sqe->addr = (ulong)_message;
        sqe->ioprio = IORING_RECV_MULTISHOT;
        sqe->flags = IOSQE_BUFFER_SELECT;
        sqe->buf_group = _buffers!.UseGroup();
        sqe->msg_flags = Libc.MSG_TRUNC; // the header then reports a cut datagram's real length
        _armed = true;
    }

    private void CancelReceive()
    {
        Debug.Assert(OnLoopThread, "the RECVMSG is cancelled on the loop thread");
        if (!_armed || _owner.Loop.IsStopping) // the stop cancels everything
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Cancel);
        if (sqe == null)
        {
            // Retry at the loop's next iteration (its submit makes room), or the close would wait for ever.
            _owner.Loop.RetryNextIteration(this, static r => r.CancelReceive());
            return;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = _owner.UserDataOf(UdpRequestKind.Receive);
    }

    private void BackOff()
    {
        if (!CanArm)
        {
            return;
        }
        _backingOff = true;
        SubmitBackoff();
    }

    private void SubmitBackoff()
    {
        Debug.Assert(_backingOff, "a back-off TIMEOUT without the back-off state");
        if (_closing || _owner.Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.ReceiveBackoff);
        if (sqe == null)
        {
            _owner.Loop.RetryNextIteration(this, static r => r.SubmitBackoff()); // after the next submit made room
            return;
        }
        ReceiveBackoff.Prepare(sqe);
    }

    public void OnReceive(ReceivedBytes data, uint flags)
    {
        Debug.Assert(OnLoopThread, "completions run on the loop thread");
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false; // a 0-byte datagram ends a multishot RECVMSG too (the kernel takes a 0 result for the end)
        }
        try
        {
            foreach (ReadOnlySpan<byte> buffer in data)
            {
                OnDatagram(buffer); // one: receive bundles are not asked for
            }
        }
        finally
        {
            MaybeRearm(); // also when handing it over threw (the loop reports that): the socket keeps receiving
        }
    }

    private void OnDatagram(ReadOnlySpan<byte> buffer)
    {
        int payloadOffset = Datagrams.PayloadOffset + _controlSpace;
        if (buffer.Length < payloadOffset)
        {
            return; // the kernel always writes the header and the name area
        }
        io_uring_recvmsg_out header = MemoryMarshal.Read<io_uring_recvmsg_out>(buffer);
        // A cut name's real length exceeds the room: never read past it.
        ReadOnlySpan<byte> name = buffer.Slice(Datagrams.HeaderSize,
            (int)Math.Min(header.namelen, (uint)Datagrams.NameSpace));
        ReadOnlySpan<byte> payload = buffer[payloadOffset..];
        int largest = _largestDatagram; // coalescing, buffers hold 64 KiB: cut here, as the kernel would
        // With MSG_TRUNC asked for, payloadlen is the datagram's real length even when the buffer took less of it.
        int datagramLength = (int)Math.Max(header.payloadlen, (uint)payload.Length);
        int segmentSize = 0, interfaceIndex = 0, localLength = 0;
        Span<byte> localName = stackalloc byte[LocalAddressFormat.IPv6NameSize];
        if (_controlSpace > 0)
        {
            localLength = ControlMessages.Read(
                buffer.Slice(Datagrams.PayloadOffset, (int)Math.Min(header.controllen, (uint)_controlSpace)),
                _localFormat, localName, out segmentSize, out interfaceIndex);
            if (localLength == 0 && _reportsLocalAddresses)
            {
                localLength = _localFormat.WriteUnspecified(localName); // none reported: "any", not a stale one
            }
        }
        var datagram = new ReceivedDatagram(payload, datagramLength, name, localName[..localLength], interfaceIndex);
        if (segmentSize > 0 && datagramLength > segmentSize)
        {
            // A coalesced burst (UDP_GRO): equal datagrams of segmentSize, the last one maybe shorter.
            _coalescedReceives++;
            _owner.Loop.OnCoalescedReceive();
            for (int offset = 0; offset < datagramLength; offset += segmentSize)
            {
                int length = Math.Min(segmentSize, datagramLength - offset);
                ReadOnlySpan<byte> segment = offset < payload.Length
                    ? payload.Slice(offset, Math.Min(length, payload.Length - offset))
                    : default;
                Deliver(datagram with { Payload = segment[..Math.Min(segment.Length, largest)], Length = length });
            }
            return;
        }
        Deliver(datagram with { Payload = payload[..Math.Min(payload.Length, largest)] });
    }

    private void Deliver(in ReceivedDatagram datagram)
    {
        _received++;
        _owner.Loop.OnDatagramReceived(datagram.Payload.Length);
        if (_channel.Deliver(datagram))
        {
            Pause();
        }
    }

    /// <summary>A RECVMSG completion without a buffer: an error, or its end (cancelled, ENOBUFS).</summary>
    public void OnReceiveEnded(int result, uint flags)
    {
        Debug.Assert(OnLoopThread, "completions run on the loop thread");
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
        }
        switch (-result)
        {
            case Errno.ENOBUFS:
                _owner.Loop.OnOwnerBuffersExhausted();
                // Every buffer was taken. Those given back are published before the next submit; if none came back
                // since the last ENOBUFS, re-arming would fail again at once: wait a little first.
                if (_buffers!.OnExhausted(ref _exhaustionMark))
                {
                    MaybeRearm();
                }
                else
                {
                    BackOff();
                }
                break;
            case <= 0: // a result without a buffer (not expected), or cancelled for a pause or the close
            case Errno.ECANCELED:
            case Errno.EAGAIN:
            case Errno.EINTR:
                MaybeRearm();
                break;
            default:
                // A socket error (ICMP: ECONNREFUSED, EHOSTUNREACH, ...), cleared by reading it: it goes to the
                // oldest waiting receive or the next operation, and receiving goes on.
                _channel.Fail(SocketErrors.FromErrno(-result));
                if (IsIcmpError(-result))
                {
                    MaybeRearm();
                }
                else
                {
                    BackOff(); // an error that may persist: do not spin on it
                }
                break;
        }
    }

    private static bool IsIcmpError(int errno) => SocketErrors.ToSocketError(errno) is
        SocketError.ConnectionRefused or SocketError.HostUnreachable or SocketError.NetworkUnreachable or
        SocketError.HostDown or SocketError.NetworkDown or SocketError.MessageSize or SocketError.TimedOut;
}
