using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// One datagram on its way out: its bytes and addresses copied into native memory that the kernel reads until the
/// SENDMSG's CQE. Pooled by the <see cref="UdpSender"/>.
/// </summary>
/// <remarks>
/// An <see cref="Awaited"/> send completes on the thread pool (this is the work item). A chosen source comes first in
/// the control data, so it stays when UDP_SEGMENT goes.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe class UdpSendOperation : IValueTaskSource<int>, IThreadPoolWorkItem
{
    private const int NameSpace = 128; // sizeof(struct sockaddr_storage)
    private static readonly int s_controlSpace = ControlMessages.LocalAddressSpace + ControlMessages.SegmentSpace;

    private readonly UdpSender _sender;
    private ManualResetValueTaskSourceCore<int> _core; // mutable struct: never readonly
    private Libc.msghdr* _message; // msghdr, iovec, name
    private byte* _data;            // the copy: grows, never shrinks
    private int _capacity;
    private byte* _payload;         // what the kernel reads: the copy, or the lent buffer's pinned memory
    private IMemoryOwner<byte>? _lent; // the caller's buffer, sent without a copy
    private MemoryHandle _lentPin;
    private int _result;
    private int _localAddressSpace; // the control room the source address takes (0: routing chooses it)
    private bool _offloading;
    private OperationHolds _holds; // an awaited send's completion and caller (a misuse never pools one in flight)
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

    /// <summary>The next (older) send in the sender's stack for the loop.</summary>
    public UdpSendOperation? NextToSubmit;

    /// <summary>Its tag in the SENDMSG's user_data.</summary>
    public ushort Index { get; }

    public bool Awaited { get; private set; }

    public Libc.msghdr* Message => _message;

    /// <summary>The datagrams' size of a segmented send, 0 for one datagram.</summary>
    public int SegmentSize { get; private set; }

    public int Length { get; private set; }

    public bool UsesSegmentOffload => _offloading;

    /// <summary>Going one by one: the bytes of the segments already sent; else 0.</summary>
    public int BytesSentOneByOne
        => SegmentSize > 0 && !UsesSegmentOffload ? (int)(_message->msg_iov->iov_base - (nuint)_payload) : 0;

    public bool HasChosenSource => _localAddressSpace > 0;

    /// <summary>The errno with which the kernel refused to segment this send, until one of its datagrams went alone;
    /// else 0.</summary>
    public int SegmentRefusal { get; set; }

    public int SegmentCount => SegmentSize == 0 ? 1 : (Length + SegmentSize - 1) / SegmentSize;

    public short Version => _core.Version;

    /// <summary>A payload longer than <paramref name="segmentSize"/> goes as datagrams of that size: with UDP_SEGMENT
    /// when <paramref name="offload"/>, else one at a time.</summary>
    public void Prepare(ReadOnlyMemory<byte> payload, SocketAddress? to, SocketAddress? from, bool awaited,
        int segmentSize = 0, bool offload = true, IMemoryOwner<byte>? lent = null)
    {
        Debug.Assert(_message != null && _lent is null, "prepared after Free, or still holding a lent buffer");
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
            _lentPin = payload.Pin(); // unpinned and disposed in ReleaseLent, once the kernel is done
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

    public bool HoldsLent => _lent is not null;

    /// <summary>Once the kernel is done with the send (or never had it).</summary>
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

    /// <summary>From now on one datagram per SENDMSG, starting at the first segment.</summary>
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

    /// <summary>False when the segment just sent was the last.</summary>
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

    public bool CancelRequested => _cancelRequested;

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

    /// <summary>A cancellation from now on finds nothing; waits for one running.</summary>
    public void DropCancellation()
    {
        _cancellation.Dispose();
        _cancellation = default;
        _token = default;
    }

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
        // A stale token throws here, before anything changes; so does a result taken early, and the send still
        // finishes and comes back to the pool by itself.
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

    /// <summary>Once the socket is closed and this operation is back in the pool.</summary>
    public void Free()
    {
        Debug.Assert(_lent is null, "freed while holding a lent buffer");
        NativeMemory.Free(_data);
        NativeMemory.Free(_message);
        _data = null;
        _message = null;
        _sender.OnCopyResized(-_capacity);
        _capacity = 0;
        GC.SuppressFinalize(this);
    }

    /// <summary>An awaited send whose caller dropped its ValueTask never comes back to the pool: its memory goes here
    /// (the kernel is done with it: the sender's in-flight table held it until the CQE).</summary>
    ~UdpSendOperation()
    {
        NativeMemory.Free(_data);
        NativeMemory.Free(_message);
    }
}
