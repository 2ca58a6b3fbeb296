using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The receiving half of an <see cref="IoUringUdpSocket"/>: one multishot RECVMSG that selects buffers from the socket's
/// own provided-buffer group (each buffer holds the io_uring_recvmsg_out header, the source address and one whole
/// datagram of up to <see cref="IoUringUdpOptions.MaxDatagramSize"/>). Each datagram is copied straight into the oldest
/// waiting receive's buffer, or else into a bounded queue of copies; the ring buffer goes back to the kernel at once.
/// </summary>
/// <remarks>
/// <para>Threads: the RECVMSG, its completions and the arming state belong to the loop thread; receives are asked for
/// from any thread. The queue, the waiting receives and the operation pool are guarded by one lock, held for a copy at
/// most.</para>
/// <para>A full queue stops the RECVMSG (it is cancelled and not re-armed) until receives have taken half of the queue:
/// the kernel's socket buffer then holds further datagrams, and drops new ones when it is full, as for any UDP socket.
/// The datagrams already on their way when the queue filled are dropped too (the newest: the kernel's own policy, and the
/// order of the rest is kept) and counted (<see cref="Dropped"/>).</para>
/// <para>Errors the kernel reports through the socket (ICMP port unreachable: ECONNREFUSED on a connected socket, and
/// the like) end the RECVMSG; the error goes to the oldest waiting receive, or else to the socket's next operation,
/// and the RECVMSG is re-armed: the socket stays usable.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe class UdpReceiver
{
    private readonly IoUringUdpSocket _socket;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly IoUringUdpOptions _options;
    private readonly Lock _gate = new();
    private readonly DatagramQueue _queue;
    private readonly Stack<UdpReceiveOperation> _pool = new();
    private UdpReceiveOperation? _firstWaiting, _lastWaiting; // waiting receives, oldest first
    private UdpReceiveOperation? _filling;  // a batch completing on the thread pool, still taking datagrams until it runs
    private bool _queueFull;                // under the lock: the RECVMSG was stopped for a full queue; the first receive to make room resumes it
    private bool _closed;                   // under the lock: no new receive waits

    // Loop thread only.
    private ReceiveBuffers? _buffers;
    private Libc.msghdr* _message;          // the RECVMSG's msghdr (sizes of the name and control areas), then a scratch name area
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
        _queue = new DatagramQueue(options.ReceiveQueueCapacity);
    }

    public long Received => Volatile.Read(ref _received);

    public long Dropped => Volatile.Read(ref _dropped);

    public long Exhaustions => _buffers?.Exhaustions ?? 0;


    /// <summary>Registers the socket's buffer group and arms the RECVMSG. Loop thread.</summary>
    public void Start()
    {
        _buffers = new ReceiveBuffers(_owner.Loop.Ring, _options.ReceiveBufferCount, Datagrams.PayloadOffset + _options.MaxDatagramSize);
        _owner.OwnReceiveBuffers = _buffers;
        _owner.Loop.AddOwnerReceiveBuffers(_buffers);
        // The kernel reads only the name and control sizes of a multishot RECVMSG's msghdr (and needs msg_name non-null
        // for the name to be reported at all): it writes the name into each buffer, after the header.
        _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + Datagrams.NameSpace));
        _message->msg_name = _message + 1;
        _message->msg_namelen = Datagrams.NameSpace;
        MaybeRearm();
    }

    // ---- receives (any thread) ----

    public ValueTask<DatagramResult> ReceiveAsync(Memory<byte> buffer, SocketAddress? from, CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            return ValueTask.FromCanceled<DatagramResult>(cancellationToken);
        }
        UdpReceiveOperation operation;
        lock (_gate)
        {
            if (TakeFailure() is { } failure)
            {
                return ValueTask.FromException<DatagramResult>(failure);
            }
            if (_queue.TryDequeue(buffer.Span, from, out DatagramResult result))
            {
                MadeRoom();
                return new ValueTask<DatagramResult>(result);
            }
            operation = Wait(buffer, from, batch: null, cancellationToken);
        }
        operation.RegisterCancellation();
        return new ValueTask<DatagramResult>(operation, operation.Version);
    }

    public ValueTask<int> ReceiveBatchAsync(UdpDatagramBatch batch, CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            return ValueTask.FromCanceled<int>(cancellationToken);
        }
        batch.Clear();
        UdpReceiveOperation operation;
        lock (_gate)
        {
            if (TakeFailure() is { } failure)
            {
                return ValueTask.FromException<int>(failure);
            }
            FillFromQueue(batch);
            if (batch.Count > 0)
            {
                return new ValueTask<int>(batch.Count);
            }
            operation = Wait(Memory<byte>.Empty, from: null, batch, cancellationToken);
        }
        operation.RegisterCancellation();
        return new ValueTask<int>(operation, operation.Version);
    }

    // Under the lock.
    private Exception? TakeFailure()
    {
        if (_closed)
        {
            return new ObjectDisposedException(nameof(IoUringUdpSocket));
        }
        return _socket.TakePendingError();
    }

    // Under the lock.
    private UdpReceiveOperation Wait(Memory<byte> buffer, SocketAddress? from, UdpDatagramBatch? batch, CancellationToken cancellationToken)
    {
        UdpReceiveOperation operation = _pool.TryPop(out UdpReceiveOperation? pooled) ? pooled : new UdpReceiveOperation(this);
        operation.Prepare(buffer, from, batch, cancellationToken);
        operation.Previous = _lastWaiting;
        operation.Next = null;
        if (_lastWaiting is null)
        {
            _firstWaiting = operation;
        }
        else
        {
            _lastWaiting.Next = operation;
        }
        _lastWaiting = operation;
        return operation;
    }

    // Under the lock.
    private void Unlink(UdpReceiveOperation operation)
    {
        if (operation.Previous is null)
        {
            _firstWaiting = operation.Next;
        }
        else
        {
            operation.Previous.Next = operation.Next;
        }
        if (operation.Next is null)
        {
            _lastWaiting = operation.Previous;
        }
        else
        {
            operation.Next.Previous = operation.Previous;
        }
        operation.Previous = operation.Next = null;
    }

    // Under the lock.
    private void FillFromQueue(UdpDatagramBatch batch)
    {
        while (!batch.IsFull && _queue.TryDequeue(batch.NextBuffer, batch.NextAddress, out DatagramResult result))
        {
            batch.Commit(result);
        }
        MadeRoom();
    }

    // Under the lock, after taking from the queue: resume receiving once half of a full queue is free again.
    private void MadeRoom()
    {
        if (_queueFull && _queue.Count <= _queue.Capacity / 2)
        {
            _queueFull = false;
            _owner.Loop.Schedule(static r => ((UdpReceiver)r!).Resume(), this);
        }
    }

    /// <summary>A waiting receive's token was cancelled (any thread).</summary>
    public void Cancel(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            if (operation.Completed)
            {
                return;
            }
            operation.Completed = true;
            Unlink(operation);
        }
        operation.CompleteLater(default, new OperationCanceledException(operation.Token));
    }

    /// <summary>A batch's completion runs (thread pool): it takes no more datagrams from the loop, but what waits in the queue.</summary>
    public void SealBatch(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            if (_filling == operation)
            {
                _filling = null;
            }
            FillFromQueue(operation.Batch!);
        }
    }

    public void Return(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            _pool.Push(operation);
        }
    }

    // ---- the RECVMSG (loop thread) ----

    /// <summary>A completion with a buffer: one datagram (its header, source address and payload).</summary>
    public void OnReceive(ReceivedBytes data, uint flags)
    {
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
        if (buffer.Length < Datagrams.PayloadOffset)
        {
            return; // the kernel always writes the header and the name area; nothing else can be read from this
        }
        io_uring_recvmsg_out header = MemoryMarshal.Read<io_uring_recvmsg_out>(buffer);
        // The real name length may exceed the room reserved for it (then the name was cut): never read past the room.
        ReadOnlySpan<byte> name = buffer.Slice(Datagrams.HeaderSize, (int)Math.Min(header.namelen, (uint)Datagrams.NameSpace));
        ReadOnlySpan<byte> payload = buffer[Datagrams.PayloadOffset..];
        // With MSG_TRUNC asked for, payloadlen is the datagram's real length even when the buffer took less of it.
        int datagramLength = (int)Math.Max(header.payloadlen, (uint)payload.Length);
        _received++;
        _owner.Loop.OnBytesReceived(payload.Length);

        UdpReceiveOperation? completed = null;
        Exception? error = null;
        bool pause = false;
        lock (_gate)
        {
            if (_filling is { } filling)
            {
                Append(filling.Batch!, payload, datagramLength, name);
                if (filling.Batch!.IsFull)
                {
                    _filling = null;
                }
                return;
            }
            if (_firstWaiting is { } waiting)
            {
                Unlink(waiting);
                waiting.Completed = true;
                completed = waiting;
                if (waiting.Batch is { } batch)
                {
                    try
                    {
                        Append(batch, payload, datagramLength, name);
                    }
                    catch (Exception ex)
                    {
                        error = ex; // as for a single receive's copy: the receive ends with the error, not never
                    }
                    _filling = error is null && !batch.IsFull ? waiting : null; // later datagrams join it until its completion runs
                }
            }
            else if (!_queue.TryEnqueue(payload, datagramLength, name))
            {
                _dropped++;
            }
            else if (_queue.IsFull && !_closed)
            {
                _queueFull = true;
                pause = true;
            }
        }
        if (completed is not null)
        {
            DatagramResult result = default;
            try
            {
                if (completed.Batch is null)
                {
                    result = Datagrams.CopyOut(payload, datagramLength, name, completed.Buffer.Span, completed.From);
                }
            }
            catch (Exception ex)
            {
                // The caller's memory failed (a disposed MemoryManager, say): the receive ends with that, not never.
                error = ex;
            }
            completed.CompleteLater(result, error);
        }
        if (pause)
        {
            Pause();
        }
    }

    private static void Append(UdpDatagramBatch batch, ReadOnlySpan<byte> payload, int datagramLength, ReadOnlySpan<byte> name)
    {
        if (batch.IsFull)
        {
            // Only when one batch was given to two receives at once: the other one filled it.
            throw new InvalidOperationException("The batch is full: another receive that has not completed was given it too. Give each waiting receive its own batch.");
        }
        batch.Commit(Datagrams.CopyOut(payload, datagramLength, name, batch.NextBuffer, batch.NextAddress));
    }

    /// <summary>A RECVMSG completion without a buffer: an error, or its end (cancelled, ENOBUFS).</summary>
    public void OnReceiveEnded(int result, uint flags)
    {
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
        }
        switch (-result)
        {
            case Errno.ENOBUFS:
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
                // An error of the socket (ICMP: ECONNREFUSED on a connected socket, EHOSTUNREACH, ...): reading it
                // cleared it. It goes to the next operation; receiving goes on.
                Fail(SocketErrors.FromErrno(-result));
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

    /// <summary>An error for the oldest waiting receive, or else for the socket's next operation.</summary>
    private void Fail(SocketException error)
    {
        UdpReceiveOperation? waiting;
        lock (_gate)
        {
            waiting = _firstWaiting;
            if (waiting is not null)
            {
                Unlink(waiting);
                waiting.Completed = true;
            }
        }
        if (waiting is null)
        {
            _socket.SetPendingError(error);
        }
        else
        {
            waiting.CompleteLater(default, error);
        }
    }

    public void OnBackoffEnded()
    {
        _backingOff = false;
        MaybeRearm();
    }

    private void Pause()
    {
        _paused = true;
        CancelReceive();
    }

    private void Resume()
    {
        _paused = false;
        MaybeRearm();
    }

    private bool CanArm => !_armed && !_backingOff && !_paused && !_closing && !_owner.Loop.IsStopping;

    private void MaybeRearm()
    {
        if (!CanArm)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Receive);
        if (sqe == null)
        {
            BackOff(); // try again later rather than stay deaf
            return;
        }
        sqe->opcode = IORING_OP_RECVMSG;
        sqe->fd = _fd;
        sqe->addr = (ulong)_message;
        sqe->ioprio = IORING_RECV_MULTISHOT;
        sqe->flags = IOSQE_BUFFER_SELECT;
        sqe->buf_group = _buffers!.GroupId;
        sqe->msg_flags = Libc.MSG_TRUNC; // the header then reports a cut datagram's real length
        _armed = true;
    }

    private void CancelReceive()
    {
        if (!_armed || _owner.Loop.IsStopping) // the stop cancels everything
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.Cancel);
        if (sqe == null)
        {
            // Retry at the loop's next iteration (its submit makes room), or the close would wait for ever.
            _owner.Loop.Schedule(static r => ((UdpReceiver)r!).CancelReceive(), this);
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
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, UdpRequestKind.ReceiveBackoff);
        if (sqe == null)
        {
            // Not even the TIMEOUT got an SQE: retry at the loop's next iteration, after its submit made room.
            _owner.Loop.Schedule(static r => ((UdpReceiver)r!).OnBackoffEnded(), this);
            return;
        }
        ReceiveBackoff.Prepare(sqe);
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
