using System.Diagnostics;
using System.Net;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;

namespace IoUring.Net;

/// <summary>
/// One waiting receive (a datagram or a batch), pooled by the <see cref="DatagramChannel"/>. Completed on the thread
/// pool (this is the work item), so the loop thread never runs application code.
/// </summary>
/// <remarks>The channel's lock guards the public fields while the operation waits.</remarks>
[SupportedOSPlatform("linux")]
internal sealed class UdpReceiveOperation(DatagramChannel channel)
    : IValueTaskSource<DatagramResult>, IValueTaskSource<int>, IThreadPoolWorkItem
{
    private ManualResetValueTaskSourceCore<DatagramResult> _core; // mutable struct: never readonly
    private DatagramResult _result;
    private Exception? _error;
    private CancellationTokenRegistration _cancellation;
    // A receive withdrawn before any completion was queued gives up the completion's hold too.
    private OperationHolds _holds;

    public Memory<byte> Buffer;
    public SocketAddress? From;
    public SocketAddress? Local;
    public UdpDatagramBatch? Batch;
    public CancellationToken Token;
    public bool Completed;           // a result or an error is set (or on its way): no one else may complete it
    public Exception? FillError;     // a datagram could not join the batch while it filled (its completion fails)
    public UdpReceiveOperation? Previous, Next; // the channel's list of waiting receives

    public short Version => _core.Version;

    public void Prepare(Memory<byte> buffer, SocketAddress? from, SocketAddress? local, UdpDatagramBatch? batch,
        CancellationToken token)
    {
        _core.Reset();
        Buffer = buffer;
        From = from;
        Local = local;
        Batch = batch;
        Token = token;
        Completed = false;
        FillError = null;
        _holds.Reset();
        _error = null;
        _result = default;
    }

    public void RegisterCancellation()
    {
        if (Token.CanBeCanceled)
        {
            _cancellation = Token.UnsafeRegister(static o => ((UdpReceiveOperation)o!).OnCancelled(), this);
        }
    }

    private void OnCancelled() => channel.Cancel(this);

    public void CompleteLater(DatagramResult result, Exception? error)
    {
        _result = result;
        _error = error;
        ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);
    }

    void IThreadPoolWorkItem.Execute()
    {
        if (Batch is { } batch && _error is null)
        {
            _error = channel.SealBatch(this);
            _result = new DatagramResult(batch.Count, batch.Count);
        }
        OperationHolds.BeginSignalling(this); // a caller resumed inline takes this completion's hold
        try
        {
            if (_error is { } error)
            {
                _core.SetException(error);
            }
            else
            {
                _core.SetResult(_result);
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

    public DatagramResult GetResult(short token)
    {
        // A stale token throws here, before anything changes. A result taken before a datagram came withdraws the
        // receive, so the next datagram goes to the next receive (or the queue), not to a caller who gave up.
        ValueTaskSourceStatus status = _core.GetStatus(token);
        if (_holds.CallerDone)
        {
            throw new InvalidOperationException("The receive's result was taken already: a ValueTask is awaited once.");
        }
        if (status == ValueTaskSourceStatus.Pending)
        {
            if (channel.Withdraw(this))
            {
                ReleaseHold(); // no completion will run
            }
            ReleaseCallerHold();
            throw new InvalidOperationException("The receive has not completed: await its ValueTask instead of "
                + "taking its result (the receive was withdrawn).");
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
        Debug.Assert(Completed && Previous is null && Next is null, "a receive back to the pool while still waiting");
        _cancellation.Dispose(); // the callback may be completing this operation: it is over when Dispose returns
        _cancellation = default;
        Buffer = default;
        From = null;
        Local = null;
        Batch = null;
        _core.Reset(); // a token of this receive fails from now on, before the pool hands the operation out again
        channel.Return(this);
    }

    int IValueTaskSource<int>.GetResult(short token) => GetResult(token).BytesReceived;

    public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}
