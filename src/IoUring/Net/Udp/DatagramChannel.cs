using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// Where a <see cref="UdpReceiver"/>'s datagrams meet the socket's receives, as in a bounded channel: the loop writes
/// each datagram into the oldest waiting receive, else into the <see cref="DatagramQueue"/>.
/// </summary>
/// <remarks>One lock guards the queue, the waiting receives and the pool, held for a copy at most.</remarks>
[SupportedOSPlatform("linux")]
internal sealed class DatagramChannel
{
    private readonly UdpReceiver _receiver;
    private readonly IoUringUdpSocket _socket;
    private readonly RingOwner _owner;
    private readonly bool _reportsLocalAddresses;
    private readonly Lock _gate = new();
    private readonly DatagramQueue _queue;
    private readonly Stack<UdpReceiveOperation> _pool = new();
    private UdpReceiveOperation? _firstWaiting, _lastWaiting; // oldest first
    private UdpReceiveOperation? _filling; // a batch completing on the thread pool: takes datagrams until it runs
    private bool _queueFull;               // the RECVMSG was paused for it; the receive that makes room resumes it
    private bool _closed;                  // no new receive waits
    private long _dropped;

    public DatagramChannel(UdpReceiver receiver, IoUringUdpSocket socket, RingOwner owner, int capacity,
        bool reportsLocalAddresses)
    {
        _receiver = receiver;
        _socket = socket;
        _owner = owner;
        _reportsLocalAddresses = reportsLocalAddresses;
        _queue = new DatagramQueue(capacity);
    }

    /// <summary>For tests: a receive loop needs one.</summary>
    public int OperationsCreated { get; private set; }

    public long Dropped => Volatile.Read(ref _dropped);

    public ValueTask<DatagramResult> ReceiveAsync(Memory<byte> buffer, SocketAddress? from, SocketAddress? local,
        CancellationToken cancellationToken)
    {
        if (cancellationToken.IsCancellationRequested)
        {
            return ValueTask.FromCanceled<DatagramResult>(cancellationToken);
        }
        UdpReceiveOperation operation;
        lock (_gate)
        {
            if (TakeFailureUnsynchronized() is { } failure)
            {
                return ValueTask.FromException<DatagramResult>(failure);
            }
            if (_queue.TryDequeue(buffer.Span, from, local, out DatagramResult result))
            {
                MadeRoomUnsynchronized();
                return new ValueTask<DatagramResult>(CountTruncated(result));
            }
            operation = WaitUnsynchronized(buffer, from, local, batch: null, cancellationToken);
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
        batch.Clear(localAddresses: _reportsLocalAddresses);
        UdpReceiveOperation operation;
        lock (_gate)
        {
            if (TakeFailureUnsynchronized() is { } failure)
            {
                return ValueTask.FromException<int>(failure);
            }
            FillFromQueueUnsynchronized(batch);
            if (batch.Count > 0)
            {
                return new ValueTask<int>(batch.Count);
            }
            operation = WaitUnsynchronized(Memory<byte>.Empty, from: null, local: null, batch, cancellationToken);
        }
        operation.RegisterCancellation();
        return new ValueTask<int>(operation, operation.Version);
    }

    private Exception? TakeFailureUnsynchronized()
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        if (_closed)
        {
            return new ObjectDisposedException(nameof(IoUringUdpSocket));
        }
        return _socket.TakePendingError();
    }

    private UdpReceiveOperation WaitUnsynchronized(Memory<byte> buffer, SocketAddress? from, SocketAddress? local,
        UdpDatagramBatch? batch, CancellationToken cancellationToken)
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        Debug.Assert(!_closed, "a receive waits on a closed socket: nothing would complete it");
        if (!_pool.TryPop(out UdpReceiveOperation? operation))
        {
            operation = new UdpReceiveOperation(this);
            OperationsCreated++;
        }
        operation.Prepare(buffer, from, local, batch, cancellationToken);
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

    private void UnlinkUnsynchronized(UdpReceiveOperation operation)
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
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

    private void FillFromQueueUnsynchronized(UdpDatagramBatch batch)
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        while (!batch.IsFull && _queue.TryDequeue(batch.NextBuffer, batch.NextAddress, batch.NextLocalAddress,
            out DatagramResult result))
        {
            batch.Commit(CountTruncated(result));
        }
        MadeRoomUnsynchronized();
    }

    // A datagram taken from the queue, off the loop: a cut one counts on the loop's counters all the same.
    private DatagramResult CountTruncated(DatagramResult result)
    {
        if (result.Truncated)
        {
            _owner.Loop.OnQueuedDatagramTruncated();
        }
        return result;
    }

    // After taking from the queue: resume receiving once half of a full queue is free again.
    private void MadeRoomUnsynchronized()
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        if (_queueFull && _queue.Count <= _queue.Capacity / 2)
        {
            _queueFull = false;
            _owner.Loop.Schedule(static r => ((UdpReceiver)r!).Resume(), _receiver);
        }
    }

    public void Cancel(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            if (operation.Completed)
            {
                return;
            }
            operation.Completed = true;
            UnlinkUnsynchronized(operation);
        }
        operation.CompleteLater(default, new OperationCanceledException(operation.Token));
    }

    /// <summary>False when a completion is already on its way.</summary>
    public bool Withdraw(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            if (operation.Completed)
            {
                return false;
            }
            operation.Completed = true;
            UnlinkUnsynchronized(operation);
            return true;
        }
    }

    /// <summary>A batch's completion runs: it takes no more datagrams from the loop, only what waits in the queue.
    /// Returns the error a datagram met joining it, if any.</summary>
    public Exception? SealBatch(UdpReceiveOperation operation)
    {
        _owner.Loop.Options.Hooks?.BeforeBatchSealed?.Invoke();
        lock (_gate)
        {
            if (_filling == operation)
            {
                _filling = null;
            }
            if (operation.FillError is { } error)
            {
                return error;
            }
            FillFromQueueUnsynchronized(operation.Batch!);
            return null;
        }
    }

    public void Return(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            _pool.Push(operation);
        }
    }

    /// <summary>True when the queue just filled: the receiver pauses its RECVMSG.</summary>
    public bool Deliver(in ReceivedDatagram datagram)
    {
        UdpReceiveOperation? completed = null;
        List<(UdpReceiveOperation, Exception)>? failed = null;
        bool pause = false;
        lock (_gate)
        {
            if (_filling is { } filling)
            {
                Debug.Assert(filling.Completed && filling.Batch is not null, "a batch fills only after it completed");
                _filling = null;
                try
                {
                    AppendOnLoop(filling.Batch!, datagram);
                    _filling = filling.Batch!.IsFull ? null : filling;
                    return false;
                }
                catch (Exception ex)
                {
                    // One batch given to two receives: the other filled it. This one fails when its completion runs
                    // (SealBatch), and the datagram goes on to the next receive or the queue.
                    filling.FillError = ex;
                }
            }
            while (completed is null && _firstWaiting is { } waiting)
            {
                Debug.Assert(!waiting.Completed, "a completed receive is still in the waiting list");
                UnlinkUnsynchronized(waiting);
                waiting.Completed = true;
                if (waiting.Batch is not { } batch)
                {
                    completed = waiting;
                    break;
                }
                try
                {
                    AppendOnLoop(batch, datagram);
                }
                catch (Exception ex)
                {
                    // As above.
                    (failed ??= []).Add((waiting, ex));
                    continue;
                }
                completed = waiting;
                _filling = batch.IsFull ? null : waiting; // later datagrams join it until its completion runs
            }
            if (completed is null)
            {
                if (!_queue.TryEnqueue(datagram))
                {
                    _dropped++;
                    _owner.Loop.OnDatagramDropped();
                }
                else if (_queue.IsFull && !_closed)
                {
                    _queueFull = true;
                    pause = true;
                }
            }
        }
        if (failed is not null)
        {
            foreach ((UdpReceiveOperation receive, Exception error) in failed)
            {
                receive.CompleteLater(default, error);
            }
        }
        if (completed is not null)
        {
            Exception? error = null;
            DatagramResult result = default;
            try
            {
                if (completed.Batch is null)
                {
                    result = CopyOutOnLoop(datagram, completed.Buffer.Span, completed.From, completed.Local);
                }
            }
            catch (Exception ex)
            {
                // The caller's memory failed (a disposed MemoryManager, say): the receive ends with that, not never.
                error = ex;
            }
            completed.CompleteLater(result, error);
        }
        return pause;
    }

    private void AppendOnLoop(UdpDatagramBatch batch, in ReceivedDatagram datagram)
    {
        if (batch.IsFull)
        {
            throw new InvalidOperationException(
                "The batch is full: another receive that has not completed was given it too. Give each waiting " +
                "receive its own batch.");
        }
        batch.Commit(CopyOutOnLoop(datagram, batch.NextBuffer, batch.NextAddress, batch.NextLocalAddress));
    }

    private DatagramResult CopyOutOnLoop(in ReceivedDatagram datagram, Span<byte> target, SocketAddress? from,
        SocketAddress? local)
    {
        DatagramResult result = Datagrams.CopyOut(datagram, target, from, local);
        if (result.Truncated)
        {
            _owner.Loop.OnDatagramTruncated();
        }
        return result;
    }

    /// <summary>For the oldest waiting receive, else the socket's next operation.</summary>
    public void Fail(SocketException error)
    {
        UdpReceiveOperation? waiting;
        lock (_gate)
        {
            waiting = _firstWaiting;
            if (waiting is not null)
            {
                UnlinkUnsynchronized(waiting);
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

    public void Close()
    {
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
    }
}
