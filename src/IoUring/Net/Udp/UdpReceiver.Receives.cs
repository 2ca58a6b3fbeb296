using System.Diagnostics;
using System.Net;

namespace IoUring.Net;

// Receives (any thread): from the queue when it holds datagrams, else a waiting receive the RECVMSG's completions fill;
// the list of waiting receives, their cancellation and the operation pool, all under the lock.
internal sealed unsafe partial class UdpReceiver
{
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
            if (TakeFailure() is { } failure)
            {
                return ValueTask.FromException<DatagramResult>(failure);
            }
            if (_queue.TryDequeue(buffer.Span, from, local, out DatagramResult result))
            {
                MadeRoom();
                return new ValueTask<DatagramResult>(CountTruncated(result));
            }
            operation = Wait(buffer, from, local, batch: null, cancellationToken);
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
            if (TakeFailure() is { } failure)
            {
                return ValueTask.FromException<int>(failure);
            }
            FillFromQueue(batch);
            if (batch.Count > 0)
            {
                return new ValueTask<int>(batch.Count);
            }
            operation = Wait(Memory<byte>.Empty, from: null, local: null, batch, cancellationToken);
        }
        operation.RegisterCancellation();
        return new ValueTask<int>(operation, operation.Version);
    }

    // Under the lock.
    private Exception? TakeFailure()
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        if (_closed)
        {
            return new ObjectDisposedException(nameof(IoUringUdpSocket));
        }
        return _socket.TakePendingError();
    }

    // Under the lock.
    private UdpReceiveOperation Wait(Memory<byte> buffer, SocketAddress? from, SocketAddress? local,
        UdpDatagramBatch? batch, CancellationToken cancellationToken)
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
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

    // Under the lock.
    private void Unlink(UdpReceiveOperation operation)
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

    // Under the lock.
    private void FillFromQueue(UdpDatagramBatch batch)
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
        while (!batch.IsFull && _queue.TryDequeue(batch.NextBuffer, batch.NextAddress, batch.NextLocalAddress,
            out DatagramResult result))
        {
            batch.Commit(CountTruncated(result));
        }
        MadeRoom();
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

    // Under the lock, after taking from the queue: resume receiving once half of a full queue is free again.
    private void MadeRoom()
    {
        Debug.Assert(_gate.IsHeldByCurrentThread, "called without the lock");
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

    /// <summary>Takes back a receive whose caller gave up on it before it completed (any thread); false when a
    /// completion is already on its way.</summary>
    public bool Withdraw(UdpReceiveOperation operation)
    {
        lock (_gate)
        {
            if (operation.Completed)
            {
                return false;
            }
            operation.Completed = true;
            Unlink(operation);
            return true;
        }
    }

    /// <summary>A batch's completion runs (thread pool): it takes no more datagrams from the loop, but what waits in
    /// the queue; or the error a datagram met joining it, which the receive then fails with.</summary>
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
            FillFromQueue(operation.Batch!);
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
}
