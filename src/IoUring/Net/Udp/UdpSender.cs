using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The sending half of an <see cref="IoUringUdpSocket"/>: each datagram is copied into a pooled
/// <see cref="UdpSendOperation"/> and sent with one SENDMSG.
/// </summary>
/// <remarks>
/// While fewer than <see cref="IoUringUdpOptions.MaxPendingSends"/> datagrams are in flight, a send completes once its
/// copy is queued, as sendto(2) does; past that, callers wait for their own SENDMSG, so a fast sender is slowed down
/// rather than buffered without bound.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe partial class UdpSender
{
    private readonly IoUringUdpSocket _socket;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly int _maxPending;
    private readonly Lock _gate = new();
    private readonly Stack<UdpSendOperation> _pool = new();
    private int _created;           // under the lock, as _pool, _pending and _closed
    private long _copyBytes;
    private int _pending;           // datagrams (not sends) rented and not returned
    private bool _closed;           // no new sends; operations coming back are freed
    private bool _closing;          // loop thread
    private UdpSendOperation?[] _inFlight = new UdpSendOperation?[16]; // loop thread: by tag
    private UdpSendOperation? _toSubmit; // lock-free stack of sends from other threads
    private UdpSendOperation? _carried;  // loop thread: sends that found no SQ room, oldest first
    private long _sent;
    private SocketException? _pendingSendError; // an unawaited send's own failure, for the next send
    private SegmentOffloadRefusals _refusals; // mutable struct: never readonly
    private long _segmentOffloads;  // loop thread

    public UdpSender(IoUringUdpSocket socket, RingOwner owner, int fd, int maxPending)
    {
        _socket = socket;
        _owner = owner;
        _fd = fd;
        _maxPending = maxPending;
    }

    public long Sent => Volatile.Read(ref _sent);

    private bool OnLoopThread => _owner.Loop.IsOnLoopThread;

    public long SegmentOffloads => Volatile.Read(ref _segmentOffloads);

    public long CopyBytes => Interlocked.Read(ref _copyBytes);

    /// <summary>An operation's copy grew (or was freed: negative).</summary>
    public void OnCopyResized(long delta) => Interlocked.Add(ref _copyBytes, delta);

    public int Pending
    {
        get
        {
            lock (_gate)
            {
                return _pending;
            }
        }
    }

    /// <summary>With <paramref name="lent"/> no copy is made: the send owns that memory from this call on and disposes
    /// it when the kernel is done with it or the send is refused.</summary>
    public ValueTask<int> SendAsync(ReadOnlyMemory<byte> payload, SocketAddress? to, SocketAddress? from,
        CancellationToken cancellationToken, int segmentSize = 0, IMemoryOwner<byte>? lent = null)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            lent?.Dispose();
            return ValueTask.FromCanceled<int>(cancellationToken);
        }
        if (to is not null && to.Size > SocketAddresses.MaxSize)
        {
            lent?.Dispose();
            throw new ArgumentException(
                $"A socket address of {to.Size} bytes is larger than any the kernel takes.", nameof(to));
        }
        UdpSendOperation? operation = null;
        bool awaited = false;
        Exception? refusal = Refuse(payload.Length) ?? Rent(payload.Length, segmentSize, out operation, out awaited);
        if (refusal is not null)
        {
            lent?.Dispose();
            return ValueTask.FromException<int>(refusal);
        }
        bool offload = _refusals.MayOffload(segmentSize);
        try
        {
            operation!.Prepare(payload, to, from, awaited, segmentSize, offload, lent);
        }
        catch
        {
            // A MemoryManager whose Pin throws, say: the send never was, its buffer still goes back.
            if (lent is not null && !operation!.HoldsLent)
            {
                lent.Dispose();
            }
            Return(operation!);
            throw;
        }
        if (awaited && cancellationToken.CanBeCanceled)
        {
            operation.RegisterCancellation(cancellationToken);
        }
        EventLoop loop = _owner.Loop;
        if (loop.IsOnLoopThread)
        {
            Submit(operation);
        }
        else if (!Enqueue(operation))
        {
            return ValueTask.FromException<int>(
                new ObjectDisposedException(nameof(EventLoop), "The event loop has stopped."));
        }
        return awaited ? new ValueTask<int>(operation, operation.Version) : new ValueTask<int>(payload.Length);
    }

    private Exception? Refuse(int length)
    {
        if (length > IoUringUdpOptions.LargestDatagram)
        {
            return new SocketException((int)SocketError.MessageSize);
        }
        if (_socket.IsDisposing)
        {
            return new ObjectDisposedException(nameof(IoUringUdpSocket));
        }
        return _socket.TakePendingError() ?? TakePendingSendError();
    }

    private Exception? Rent(int length, int segmentSize, out UdpSendOperation? operation, out bool awaited)
    {
        operation = null;
        awaited = false;
        lock (_gate)
        {
            if (_closed)
            {
                return new ObjectDisposedException(nameof(IoUringUdpSocket));
            }
            if (_pool.TryPop(out UdpSendOperation? pooled))
            {
                operation = pooled;
            }
            else if (_created <= ushort.MaxValue)
            {
                operation = new UdpSendOperation(this, (ushort)_created++);
            }
            else
            {
                return new InvalidOperationException("65,536 sends are in flight on this socket.");
            }
            // In datagrams, so segmented sends (up to 64 KiB of copy each) hold no more than single ones.
            _pending += segmentSize > 0 && length > segmentSize ? (length + segmentSize - 1) / segmentSize : 1;
            awaited = _pending > _maxPending;
            return null;
        }
    }

    /// <summary><paramref name="continuing"/>: the next segment of a send going one by one, which a closing socket
    /// still sends.</summary>
    private void Submit(UdpSendOperation operation, bool continuing = false)
    {
        Debug.Assert(OnLoopThread, "sends are submitted on the loop thread");
        if ((_closing && !continuing) || _owner.Loop.IsStopping)
        {
            Fail(operation, Errno.EBADF);
            return;
        }
        if (operation.CancelRequested)
        {
            Fail(operation, Errno.ECANCELED); // cancelled before the loop took it: it never goes out
            return;
        }
        if (operation.Index >= _inFlight.Length)
        {
            Array.Resize(ref _inFlight, Math.Max(operation.Index + 1, 2 * _inFlight.Length));
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Send, operation.Index);
        if (sqe == null)
        {
            Fail(operation, Errno.ENOBUFS); // the SQ stayed full: as sendto(2) with no room
            return;
        }
        Debug.Assert(_inFlight[operation.Index] is null, "a send submitted while its previous SENDMSG is in flight");
        Debug.Assert(operation.Message != null, "a send submitted after its memory was freed");
        _inFlight[operation.Index] = operation;
        sqe->opcode = IORING_OP_SENDMSG;
        sqe->fd = _fd;
        // SAFETY: _inFlight holds the operation until this CQE; its native memory and pinned lent buffer are freed
        // only after it.
        sqe->addr = (ulong)operation.Message;
        sqe->len = 1;
        sqe->msg_flags = Libc.MSG_NOSIGNAL;
    }

    /// <summary>A segmented send the kernel would not segment goes again, one datagram per SENDMSG.</summary>
    public void OnSendCompleted(uint tag, int result)
    {
        Debug.Assert(OnLoopThread, "completions run on the loop thread");
        UdpSendOperation operation = _inFlight[tag]!;
        Debug.Assert(operation is not null, "a SENDMSG completed that is not in flight");
        _inFlight[tag] = null;
        if (operation.SegmentSize > 0)
        {
            if (operation.UsesSegmentOffload
                && SegmentOffloadRefusals.IsRefusalToSegment(operation, -result, _socket))
            {
                // Remembered once a datagram goes alone (SegmentOffloadRefusals).
                operation.SegmentRefusal = -result;
                operation.SendOneByOne();
                Submit(operation, continuing: true);
                return;
            }
            if (result >= 0)
            {
                _owner.Loop.OnDatagramsSent(operation.UsesSegmentOffload ? operation.SegmentCount : 1, result);
                if (operation.UsesSegmentOffload)
                {
                    _sent += operation.SegmentCount;
                    _segmentOffloads++;
                    _owner.Loop.OnSegmentOffload();
                    Complete(operation, operation.Length);
                    return;
                }
                _sent++;
                _refusals.Remember(operation);
                if (operation.NextSegment())
                {
                    Submit(operation, continuing: true);
                    return;
                }
                Complete(operation, operation.Length);
                return;
            }
            Fail(operation, -result);
            return;
        }
        if (result >= 0)
        {
            _sent++;
            _owner.Loop.OnDatagramsSent(1, result);
        }
        Complete(operation, result);
    }

    /// <summary>If segments already went one by one, a waiting caller gets their bytes, as with sendmmsg(2); a caller
    /// gone on gets the error at its next send.</summary>
    private void Fail(UdpSendOperation operation, int errno)
    {
        int sent = operation.BytesSentOneByOne;
        Complete(operation, sent > 0 && operation.Awaited ? sent : -errno);
    }

    internal SocketException? TakePendingSendError()
        => Volatile.Read(ref _pendingSendError) is null ? null : Interlocked.Exchange(ref _pendingSendError, null);

    private void Complete(UdpSendOperation operation, int result)
    {
        if (operation.Awaited)
        {
            // Buffer and room go back now, even if the caller never awaits; the operation once it took the result.
            ReleaseKernelHold(operation);
            operation.CompleteLater(result);
            return;
        }
        if (result < 0 && !_closing)
        {
            // Its caller went on. What the network answered (ICMP) is for the socket's next operation; anything else
            // (ENETUNREACH for a chosen source the host lacks, say) only for the next send: a server's receive loop
            // must not fail for an address it answered badly.
            SocketException error = SocketErrors.FromErrno(-result);
            if (error.SocketErrorCode is SocketError.ConnectionRefused or SocketError.HostUnreachable
                or SocketError.HostDown
                || (error.SocketErrorCode is SocketError.NetworkUnreachable && !operation.HasChosenSource))
            {
                _socket.SetPendingError(error);
            }
            else
            {
                Volatile.Write(ref _pendingSendError, error);
            }
        }
        Return(operation);
    }

    public Exception ErrorOf(int errno)
        => errno == Errno.EBADF && _closing
            ? new ObjectDisposedException(nameof(IoUringUdpSocket))
            : SocketErrors.FromErrno(errno);

    /// <summary>The kernel is done with the send (or never had it) and no caller waits on it.</summary>
    public void Return(UdpSendOperation operation)
    {
        try
        {
            operation.ReleaseLent(); // if the caller's Dispose throws, the room still goes back
        }
        finally
        {
            // The room and the operation together: a send that finds room also finds this operation in the pool, so
            // the copies held stay at MaxPendingSends' worth (SendMemoryTests).
            operation.DropCancellation();
            lock (_gate)
            {
                _pending -= operation.SegmentCount;
                PushOrFreeUnsynchronized(operation);
            }
        }
    }

    /// <summary>Lent buffer and room go back; the operation stays with its caller.</summary>
    private void ReleaseKernelHold(UdpSendOperation operation)
    {
        try
        {
            operation.ReleaseLent();
        }
        finally
        {
            lock (_gate)
            {
                _pending -= operation.SegmentCount;
            }
        }
    }

    /// <summary>Any thread. A send not yet submitted fails in <see cref="Submit"/> instead.</summary>
    public void CancelOnLoop(UdpSendOperation operation, short version)
        => _owner.Loop.Schedule(static s =>
        {
            var (sender, operation, version) = ((UdpSender, UdpSendOperation, short))s!;
            if (sender._owner.Loop.IsOnLoopThread)
            {
                sender.CancelInFlight(operation, version);
            }
        }, (this, operation, version));

    private void CancelInFlight(UdpSendOperation operation, short version)
    {
        Debug.Assert(OnLoopThread, "in-flight sends are cancelled on the loop thread");
        // Not the same send any more (completed, maybe reused), or the loop's stop cancels everything anyway.
        if (operation.Index >= _inFlight.Length || _inFlight[operation.Index] != operation
            || operation.Version != version || _owner.Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Cancel);
        if (sqe == null)
        {
            return; // no SQE: the send completes as the kernel makes it
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = _owner.UserDataOf(UdpRequestKind.Send, operation.Index);
    }

    internal int PooledOperations
    {
        get
        {
            lock (_gate)
            {
                return _pool.Count;
            }
        }
    }

    /// <summary>Pooled, or freed once the socket is closed.</summary>
    public void ToPool(UdpSendOperation operation)
    {
        operation.DropCancellation();
        lock (_gate)
        {
            PushOrFreeUnsynchronized(operation);
        }
    }

    private void PushOrFreeUnsynchronized(UdpSendOperation operation)
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        if (_closed)
        {
            operation.Free();
        }
        else
        {
            _pool.Push(operation);
        }
    }

    public void OnClosing()
    {
        Debug.Assert(OnLoopThread, "OnClosing runs on the loop thread");
        _closing = true;
    }

    /// <summary>After the socket's last request ended: pooled operations are freed now, those still out when they come
    /// back.</summary>
    public void Release()
    {
        lock (_gate)
        {
            _closed = true;
            while (_pool.TryPop(out UdpSendOperation? operation))
            {
                operation.Free();
            }
        }
    }
}
