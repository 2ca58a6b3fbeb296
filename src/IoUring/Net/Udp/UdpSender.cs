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
/// <see cref="UdpSendOperation"/> and sent with one SENDMSG (the destination in msg_name; none on a connected socket).
/// Sends from other threads are posted to the loop, which submits every send of an iteration in its one io_uring_enter.
/// </summary>
/// <remarks>
/// <para>A send completes as soon as its copy is queued while fewer than
/// <see cref="IoUringUdpOptions.MaxPendingSends"/> datagrams are in flight (as sendto(2) returns once the kernel has
/// the datagram); an error the kernel reports for it then goes to the socket's next operation if the network answered
/// it (ICMP: refused, unreachable), else to the next send. Past that many, callers wait for their own SENDMSG's result:
/// a sender faster than the socket is slowed down rather than buffered without bound.</para>
/// <para>Threads: renting and returning operations (any thread) under the lock; submitting and completions on the
/// loop. Each in-flight SENDMSG's user_data tag is its operation's index.</para>
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
    private long _copyBytes;        // the native copies' capacity, over every operation (pooled or in flight)
    private int _pending;           // datagrams of the sends rented and not returned (a segmented send: its segments)
    private bool _closed;           // no new sends; operations coming back are freed
    private bool _closing;          // loop thread: sends reaching the loop from now on are refused
    private UdpSendOperation?[] _inFlight = new UdpSendOperation?[16]; // loop thread: by tag
    private UdpSendOperation? _toSubmit; // sends from other threads waiting for the loop: a lock-free stack
    private UdpSendOperation? _carried;  // loop thread: sends taken off the stack that found no SQ room, oldest first
    private long _sent;
    private SocketException? _pendingSendError; // a send nobody awaited failed for its own reasons: for the next send
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

    /// <summary>Segmented sends that went out with UDP_SEGMENT (one SENDMSG for all their datagrams).</summary>
    public long SegmentOffloads => Volatile.Read(ref _segmentOffloads);

    /// <summary>Bytes of native memory the send copies hold (every operation's payload capacity).</summary>
    public long CopyBytes => Interlocked.Read(ref _copyBytes);

    /// <summary>An operation's copy grew (or was freed: negative).</summary>
    public void OnCopyResized(long delta) => Interlocked.Add(ref _copyBytes, delta);

    /// <summary>Datagrams of the sends rented and not yet returned.</summary>
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

    /// <summary>Sends <paramref name="payload"/>: a copy of it, or, with <paramref name="lent"/> (the owner of the
    /// memory it is in), that memory itself, which the send owns from this call on and disposes once the kernel is
    /// done with it, also when the send is refused.</summary>
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
            // A caller's MemoryManager whose Pin throws, say: the send never was, its buffer still goes back.
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

    /// <summary>Why a send of <paramref name="length"/> bytes cannot be taken, or null.</summary>
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

    /// <summary>Takes an operation for a send of <paramref name="length"/> bytes and counts its datagrams as pending
    /// (<paramref name="awaited"/>: past the bound, its caller waits for the kernel); or says why not.</summary>
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
            // Counted in datagrams, so that segmented sends (up to 64 KiB of copy each) hold no more than single ones.
            _pending += segmentSize > 0 && length > segmentSize ? (length + segmentSize - 1) / segmentSize : 1;
            awaited = _pending > _maxPending;
            return null;
        }
    }

    /// <summary>Queues the SENDMSG; a send that gets no SQE fails by itself (ENOBUFS, as sendto(2) with no room).
    /// <paramref name="continuing"/>: the next SENDMSG of a segmented send going one datagram at a time, taken before
    /// any close, so a closing socket still sends it.</summary>
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
            Fail(operation, Errno.ECANCELED); // its caller gave up before the loop took it: it never goes out
            return;
        }
        if (operation.Index >= _inFlight.Length)
        {
            Array.Resize(ref _inFlight, Math.Max(operation.Index + 1, 2 * _inFlight.Length));
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Send, operation.Index);
        if (sqe == null)
        {
            Fail(operation, Errno.ENOBUFS); // the SQ stayed full (reported to the loop's owner)
            return;
        }
        Debug.Assert(_inFlight[operation.Index] is null, "a send submitted while its previous SENDMSG is in flight");
        Debug.Assert(operation.Message != null, "a send submitted after its memory was freed");
        _inFlight[operation.Index] = operation;
        sqe->opcode = IORING_OP_SENDMSG;
        sqe->fd = _fd;
        // SAFETY: _inFlight holds the operation until this CQE; its msghdr, iovec, name and copy (or pinned lent
        // buffer) are freed only after that (Free, ReleaseLent, or its finalizer once nothing references it).
        sqe->addr = (ulong)operation.Message;
        sqe->len = 1;
        sqe->msg_flags = Libc.MSG_NOSIGNAL;
    }

    /// <summary>A SENDMSG's CQE (<paramref name="tag"/>: its operation). A segmented send the kernel would not
    /// segment goes again one datagram at a time; one sent so goes on to its next segment. Loop thread.</summary>
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

    /// <summary>A send's request failed with <paramref name="errno"/>. Segments sent one by one before it went: as
    /// sendmmsg(2) does, a waiting caller gets their bytes; a caller gone on, the error (at its next send).</summary>
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
            // The kernel is done: the buffer and the room go back now, whether or not the caller ever awaits; the
            // operation goes back to the pool once its completion ran and its caller took the result.
            ReleaseKernelHold(operation);
            operation.CompleteLater(result);
            return;
        }
        if (result < 0 && !_closing)
        {
            // Its caller went on. What the network answered (ICMP) is the socket's, for its next operation; anything
            // else (EACCES, EINVAL, ENOBUFS, or ENETUNREACH for a chosen source the host lacks) is this send's own, for
            // the next send only: a server's receive loop must not fail for an address it answered badly.
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

    /// <summary>The send is over (the kernel is done with it, or never had it) and no caller waits on it: its lent
    /// buffer goes back to its owner, its room to the socket, the operation to the pool.</summary>
    public void Return(UdpSendOperation operation)
    {
        try
        {
            operation.ReleaseLent(); // the caller's owner: if its Dispose throws, the room is still given back
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

    /// <summary>The kernel is done with the send: its lent buffer goes back to its owner and its datagrams stop
    /// counting as pending.</summary>
    private void ReleaseKernelHold(UdpSendOperation operation)
    {
        try
        {
            operation.ReleaseLent(); // the caller's owner: if its Dispose throws, the room is still given back
        }
        finally
        {
            lock (_gate)
            {
                _pending -= operation.SegmentCount;
            }
        }
    }

    /// <summary>An awaited send's token was cancelled (any thread): on the loop, a SENDMSG of it still in flight is
    /// cancelled (one not submitted yet fails when the loop takes it, <see cref="Submit"/>).</summary>
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
            return; // no SQE (reported to the loop's owner): the send completes as the kernel makes it
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = _owner.UserDataOf(UdpRequestKind.Send, operation.Index);
    }

    /// <summary>Operations free for the next send (tests).</summary>
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

    /// <summary>The operation is free for the next send (or its memory goes, the socket being closed).</summary>
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

    /// <summary>The socket is closing: sends that reach the loop from now on are refused. Loop thread.</summary>
    public void OnClosing()
    {
        Debug.Assert(OnLoopThread, "OnClosing runs on the loop thread");
        _closing = true;
    }

    /// <summary>After the last request on the socket ended: the pooled operations' memory goes; those still out go when
    /// they come back.</summary>
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
