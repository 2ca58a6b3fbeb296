using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// One datagram on its way out of an <see cref="IoUringUdpSocket"/>: a copy of its bytes and destination in native
/// memory (a msghdr, one iovec and the sockaddr, then the payload), which the kernel reads until the SENDMSG's CQE.
/// Pooled by the <see cref="UdpSender"/> and reused: steady-state sends allocate nothing.
/// </summary>
/// <remarks>
/// <para>The copy is what lets a send complete at once: the caller's memory is free as soon as the call returns. A
/// caller who waits for the kernel (<see cref="Awaited"/>: too many sends in flight) is completed on the thread pool
/// (this is the work item) with the SENDMSG's result.</para>
/// <para>A segmented send (<see cref="SegmentSize"/>) carries a UDP_SEGMENT control message: the kernel cuts the
/// payload into datagrams of that size (GSO). Where it refuses, the same copy goes out one segment per SENDMSG
/// (<see cref="SendOneByOne"/>, <see cref="NextSegment"/>). A send from a chosen local address carries IP_PKTINFO or
/// IPV6_PKTINFO, first, so that it stays when UDP_SEGMENT goes.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe class UdpSendOperation : IValueTaskSource<int>, IThreadPoolWorkItem
{
    private const int NameSpace = 128; // sizeof(struct sockaddr_storage)
    private static readonly int s_controlSpace = ControlMessages.LocalAddressSpace + ControlMessages.SegmentSpace;

    private readonly UdpSender _sender;
    private ManualResetValueTaskSourceCore<int> _core; // mutable struct: never readonly
    private Libc.msghdr* _message; // msghdr, iovec, name
    private byte* _data;            // the copy, grown to the largest payload copied, never shrunk
    private int _capacity;
    private byte* _payload;         // what the kernel reads: the copy, or the lent buffer's pinned memory
    private IMemoryOwner<byte>? _lent; // a buffer the caller gave the send (no copy), disposed by ReleaseLent
    private MemoryHandle _lentPin;
    private int _result;
    private int _localAddressSpace; // the control room the source address takes (0: routing chooses it)
    private bool _offloading;
    // An awaited send goes back to the pool when both its completion has run and its caller is done with it (took
    // the result, or took it too early): 2, 1, 0. A caller's misuse thus never returns one still in the kernel.
    private OperationHolds _holds;
    // An awaited send's token: its cancellation fails the send if the loop has not submitted it yet, else asks the
    // kernel to cancel the SENDMSG (one still waiting for room in the socket's buffer).
    private CancellationToken _token;
    private CancellationTokenRegistration _cancellation;
    private volatile bool _cancelRequested;

    public UdpSendOperation(UdpSender sender, ushort index)
    {
        _sender = sender;
        Index = index;
        _message = (Libc.msghdr*)NativeMemory.AllocZeroed(
            (nuint)(sizeof(Libc.msghdr) + sizeof(iovec) + NameSpace + s_controlSpace));
        _message->msg_iov = (iovec*)(_message + 1);
        _message->msg_iovlen = 1;
    }

    /// <summary>The next (older) send in the sender's stack of sends waiting for the loop.</summary>
    public UdpSendOperation? NextToSubmit;

    /// <summary>Its tag in the SENDMSG's user_data.</summary>
    public ushort Index { get; }

    /// <summary>The caller waits for the kernel's result (else it went on already, and an error goes to the
    /// socket).</summary>
    public bool Awaited { get; private set; }

    public Libc.msghdr* Message => _message;

    /// <summary>The datagrams' size of a segmented send, 0 for one datagram.</summary>
    public int SegmentSize { get; private set; }

    /// <summary>The payload's length (all segments).</summary>
    public int Length { get; private set; }

    /// <summary>The SENDMSG carries UDP_SEGMENT (else a segmented send goes one segment at a time).</summary>
    public bool UsesSegmentOffload => _offloading;

    /// <summary>Going one by one: the bytes of the segments before the current one (sent); else 0.</summary>
    public int BytesSentOneByOne
        => SegmentSize > 0 && !UsesSegmentOffload ? (int)(_message->msg_iov->iov_base - (nuint)_payload) : 0;

    /// <summary>The send leaves from a chosen local address (IP_PKTINFO, IPV6_PKTINFO).</summary>
    public bool HasChosenSource => _localAddressSpace > 0;

    /// <summary>The errno with which the kernel refused to segment this send, until one of its datagrams went alone
    /// (the sender then remembers it); else 0.</summary>
    public int SegmentRefusal { get; set; }

    /// <summary>Datagrams the payload makes.</summary>
    public int SegmentCount => SegmentSize == 0 ? 1 : (Length + SegmentSize - 1) / SegmentSize;

    public short Version => _core.Version;

    /// <summary>Copies the datagram (or, <paramref name="lent"/>, pins the caller's buffer that holds it and takes
    /// it over), its destination (none on a connected socket) and its source (<paramref name="from"/>; none: routing
    /// chooses). With <paramref name="segmentSize"/> (a payload longer than it), the payload is that many bytes per
    /// datagram: with UDP_SEGMENT when <paramref name="offload"/>, else one segment at a time.</summary>
    public void Prepare(ReadOnlyMemory<byte> payload, SocketAddress? to, SocketAddress? from, bool awaited,
        int segmentSize = 0, bool offload = true, IMemoryOwner<byte>? lent = null)
    {
        _core.Reset();
        Awaited = awaited;
        _cancelRequested = false;
        _holds.Reset();
        SegmentRefusal = 0;
        Length = payload.Length; // first: SegmentCount gives the room back even if the pin below throws
        SegmentSize = segmentSize > 0 && payload.Length > segmentSize ? segmentSize : 0;
        if (lent is not null)
        {
            _lent = lent;
            _lentPin = payload.Pin(); // released, and the buffer disposed, once the kernel is done (ReleaseLent)
            _payload = (byte*)_lentPin.Pointer;
        }
        else
        {
            CopyIn(payload.Span);
        }
        iovec* iov = _message->msg_iov;
        iov->iov_base = (nuint)_payload;
        iov->iov_len = (nuint)payload.Length;
        byte* name = (byte*)(iov + 1);
        if (to is null)
        {
            _message->msg_name = null;
            _message->msg_namelen = 0;
        }
        else
        {
            to.Buffer.Span[..to.Size].CopyTo(new Span<byte>(name, NameSpace));
            _message->msg_name = name;
            _message->msg_namelen = (uint)to.Size;
        }
        byte* control = name + NameSpace;
        _localAddressSpace = from is null
            ? 0
            : ControlMessages.WriteLocalAddress(control, from.Buffer.Span[..from.Size]);
        _offloading = SegmentSize > 0 && offload;
        int segmentSpace = _offloading
            ? ControlMessages.WriteSegmentSize(control + _localAddressSpace, SegmentSize)
            : 0;
        SetControl(_localAddressSpace + segmentSpace);
        if (SegmentSize > 0 && !offload)
        {
            SendOneByOne();
        }
    }

    private void CopyIn(ReadOnlySpan<byte> payload)
    {
        if (_capacity < payload.Length)
        {
            int capacity = Math.Max(payload.Length, Math.Max(256, 2 * _capacity));
            _data = (byte*)NativeMemory.Realloc(_data, (nuint)capacity);
            _sender.OnCopyResized(capacity - _capacity);
            _capacity = capacity;
        }
        payload.CopyTo(new Span<byte>(_data, payload.Length));
        _payload = _data;
    }

    /// <summary>The kernel is done with the send (or never had it): a lent buffer is unpinned and disposed, as the
    /// caller gave it up.</summary>
    /// <summary>The send has taken over the caller's buffer (disposed by <see cref="ReleaseLent"/>).</summary>
    public bool HoldsLent => _lent is not null;

    public void ReleaseLent()
    {
        IMemoryOwner<byte>? lent = _lent;
        _lent = null;
        _payload = null;
        if (lent is not null)
        {
            _lentPin.Dispose();
            _lentPin = default;
            lent.Dispose();
        }
    }

    /// <summary>A segmented send goes one datagram per SENDMSG from now on, from its first segment (still from its
    /// chosen source).</summary>
    public void SendOneByOne()
    {
        _offloading = false;
        SetControl(_localAddressSpace);
        iovec* iov = _message->msg_iov;
        iov->iov_base = (nuint)_payload;
        iov->iov_len = (nuint)Math.Min(SegmentSize, Length);
    }

    private void SetControl(int length)
    {
        _message->msg_control = length == 0 ? null : (byte*)(_message->msg_iov + 1) + NameSpace;
        _message->msg_controllen = (nuint)length;
    }

    /// <summary>One by one: moves to the segment after the one just sent; false when that was the last.</summary>
    public bool NextSegment()
    {
        iovec* iov = _message->msg_iov;
        long next = (long)(iov->iov_base - (nuint)_payload) + SegmentSize;
        if (next >= Length)
        {
            return false;
        }
        iov->iov_base = (nuint)(_payload + next);
        iov->iov_len = (nuint)Math.Min(SegmentSize, Length - (int)next);
        return true;
    }

    /// <summary>The caller's token was cancelled: the loop fails the send if it has not submitted it, or cancels its
    /// SENDMSG.</summary>
    public bool CancelRequested => _cancelRequested;

    /// <summary>An awaited send: a cancellation of <paramref name="token"/> from now on cancels it (on the
    /// loop).</summary>
    public void RegisterCancellation(CancellationToken token)
    {
        Debug.Assert(Awaited, "only a send whose caller waits for the kernel can be cancelled");
        _token = token;
        short version = Version;
        _cancellation = token.UnsafeRegister(static (s, _) =>
        {
            var (operation, version) = ((UdpSendOperation, short))s!;
            operation._cancelRequested = true;
            operation._sender.CancelOnLoop(operation, version);
        }, (this, version));
    }

    /// <summary>Back to the pool: a cancellation from now on finds nothing (waits for one running).</summary>
    public void DropCancellation()
    {
        _cancellation.Dispose();
        _cancellation = default;
        _token = default;
    }

    /// <summary>Gives the kernel's result to the waiting caller, on the thread pool.</summary>
    public void CompleteLater(int result)
    {
        _result = result;
        ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);
    }

    void IThreadPoolWorkItem.Execute()
    {
        Debug.Assert(Awaited && _lent is null, "only an awaited send completes here, after the kernel let go of it");
        OperationHolds.BeginSignalling(this); // a caller resumed inline takes this completion's hold
        try
        {
            if (_result >= 0)
            {
                _core.SetResult(_result);
            }
            else
            {
                _core.SetException(-_result == Errno.ECANCELED && _cancelRequested
                    ? new OperationCanceledException(_token)
                    : _sender.ErrorOf(-_result));
            }
        }
        finally
        {
            if (OperationHolds.EndSignalling(this))
            {
                ReleaseHold();
            }
        }
    }

    public int GetResult(short token)
    {
        // A stale token throws here, before anything changes; so does a result taken before the kernel answered,
        // which leaves the send to finish (and come back to the pool) on its own.
        ValueTaskSourceStatus status = _core.GetStatus(token);
        if (_holds.CallerDone)
        {
            throw new InvalidOperationException("The send's result was taken already: a ValueTask is awaited once.");
        }
        if (status == ValueTaskSourceStatus.Pending)
        {
            ReleaseCallerHold();
            throw new InvalidOperationException(
                "The send has not completed: await its ValueTask instead of taking its result (it still goes out).");
        }
        try
        {
            return _core.GetResult(token);
        }
        finally
        {
            _holds.TakeSignallingHold(this);
            ReleaseCallerHold();
        }
    }

    private void ReleaseCallerHold()
    {
        if (_holds.ReleaseCaller())
        {
            ToPool();
        }
    }

    private void ReleaseHold()
    {
        if (_holds.Release())
        {
            ToPool();
        }
    }

    private void ToPool()
    {
        _core.Reset(); // a token of this send fails from now on, before the pool hands the operation out again
        _sender.ToPool(this);
    }

    public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);

    /// <summary>Frees the native memory (once the socket is closed and this operation is back in the pool).</summary>
    public void Free()
    {
        NativeMemory.Free(_data);
        NativeMemory.Free(_message);
        _data = null;
        _message = null;
        _sender.OnCopyResized(-_capacity);
        _capacity = 0;
        GC.SuppressFinalize(this);
    }

    /// <summary>An awaited send whose caller dropped its ValueTask never comes back to the pool; once the kernel is
    /// done (it is then in no list of the sender's), only the GC can tell it is gone: its native memory goes
    /// then.</summary>
    ~UdpSendOperation()
    {
        NativeMemory.Free(_data);
        NativeMemory.Free(_message);
    }
}
