using System.IO.Pipelines;
using System.Threading.Tasks.Sources;

namespace IoUring.Net;

// A flush waiting for the sender to catch up: its token's cancellation, and the IValueTaskSource its ValueTask awaits.
internal sealed partial class ConnectionOutput
{
    private void OnFlushCancelled(CancellationToken token)
    {
        AwaiterCompletion completion = default;
        bool postUnborrow = false;
        lock (_sync)
        {
            if (!_flush.IsWaiting || !_flush.Cancels(token))
            {
                return;
            }
            if (_borrowing)
            {
                postUnborrow = RequestUnborrow(new OperationCanceledException(token));
            }
            else
            {
                completion = _flush.Complete(default, new OperationCanceledException(token), _inlineContinuations);
                completion.Registration = default; // this is its callback: nothing to unregister
            }
        }
        PostUnborrow(postUnborrow);
        completion.Run();
    }

    FlushResult IValueTaskSource<FlushResult>.GetResult(short token)
    {
        lock (_sync)
        {
            return _flush.GetResult(token);
        }
    }

    ValueTaskSourceStatus IValueTaskSource<FlushResult>.GetStatus(short token)
    {
        lock (_sync)
        {
            return _flush.GetStatus(token);
        }
    }

    void IValueTaskSource<FlushResult>.OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _flush.OnCompleted(_sync, continuation, state, token, flags, _inlineContinuations);
}
