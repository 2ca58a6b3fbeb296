using System.Net;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;

namespace IoUring.Net;

/// <summary>
/// One waiting receive of an <see cref="IoUringUdpSocket"/> (a single datagram, or a batch): the source of its
/// <see cref="ValueTask"/>, pooled by the <see cref="UdpReceiver"/>, so that waiting allocates nothing.
/// </summary>
/// <remarks>
/// The loop fills the caller's buffer and then completes the operation on the thread pool (this is the work item: no
/// allocation), where the caller's continuation runs: the loop thread never runs application code. The fields below
/// the core are guarded by the receiver's lock while the operation waits.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class UdpReceiveOperation(UdpReceiver receiver)
    : IValueTaskSource<DatagramResult>, IValueTaskSource<int>, IThreadPoolWorkItem
{
    private ManualResetValueTaskSourceCore<DatagramResult> _core; // mutable struct: never readonly
    private DatagramResult _result;
    private Exception? _error;
    private CancellationTokenRegistration _cancellation;

    public Memory<byte> Buffer;
    public SocketAddress? From;
    public SocketAddress? Local;
    public UdpDatagramBatch? Batch;
    public CancellationToken Token;
    public bool Completed;           // a result or an error is set (or on its way): no one else may complete it
    public UdpReceiveOperation? Previous, Next; // the receiver's list of waiting receives

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
        _error = null;
        _result = default;
    }

    /// <summary>After the operation was handed out: a cancellation of <see cref="Token"/> takes it back.</summary>
    public void RegisterCancellation()
    {
        if (Token.CanBeCanceled)
        {
            _cancellation = Token.UnsafeRegister(static o => ((UdpReceiveOperation)o!).OnCancelled(), this);
        }
    }

    private void OnCancelled() => receiver.Cancel(this);

    /// <summary>Completes the operation on the thread pool (so the caller's continuation never runs on the
    /// loop).</summary>
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
            receiver.SealBatch(this);
            _result = new DatagramResult(batch.Count, batch.Count);
        }
        if (_error is { } error)
        {
            _core.SetException(error);
        }
        else
        {
            _core.SetResult(_result);
        }
    }

    public DatagramResult GetResult(short token)
    {
        try
        {
            return _core.GetResult(token);
        }
        finally
        {
            _cancellation.Dispose(); // the callback may have completed this operation: it is over when Dispose returns
            _cancellation = default;
            Buffer = default;
            From = null;
            Local = null;
            Batch = null;
            receiver.Return(this);
        }
    }

    int IValueTaskSource<int>.GetResult(short token) => GetResult(token).BytesReceived;

    public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);
}
