using System.Diagnostics;
using IoUring.Interop;

namespace IoUring.Net;

// Sends from other threads reach the loop through a lock-free stack, drained once per loop iteration.
internal sealed partial class UdpSender
{
    /// <summary>One drain is posted for all the sends that gather before it runs, not one per send. False when the
    /// loop has stopped.</summary>
    private bool Enqueue(UdpSendOperation operation)
    {
        UdpSendOperation? head;
        do
        {
            head = Volatile.Read(ref _toSubmit);
            operation.NextToSubmit = head;
        }
        while (Interlocked.CompareExchange(ref _toSubmit, operation, head) != head);
        if (head is not null)
        {
            return true; // a drain is posted already and will take this one too
        }
        try
        {
            _owner.Loop.Post(static s => ((UdpSender)s!).SubmitQueued(), this);
            return true;
        }
        catch (ObjectDisposedException)
        {
            for (UdpSendOperation? queued = Interlocked.Exchange(ref _toSubmit, null); queued is not null;)
            {
                UdpSendOperation next = queued.NextToSubmit!;
                queued.NextToSubmit = null;
                if (queued != operation)
                {
                    Complete(queued, -Errno.EBADF); // the loop is gone: a sender that went on loses its datagram
                }
                else
                {
                    Return(queued);
                }
                queued = next;
            }
            return false;
        }
    }

    /// <summary>Oldest first, as many as the SQ has room for; the rest wait for the next iteration, after the loop
    /// reaped completions (thousands at once would force early submits and could fill the CQ).</summary>
    private void SubmitQueued()
    {
        Debug.Assert(OnLoopThread, "queued sends are submitted on the loop thread");
        // Stopping or closing, sends are refused without an SQE and the ring may be gone.
        int room = _closing || _owner.Loop.IsStopping ? int.MaxValue : _owner.Loop.FreeSqes;
        for (; room > 0; room--)
        {
            _carried ??= TakeQueued();
            if (_carried is not { } operation)
            {
                return;
            }
            _carried = operation.NextToSubmit;
            operation.NextToSubmit = null;
            Submit(operation);
        }
        // Again next iteration while sends wait, also those on the stack: their own drain may have run already and
        // found no room. If the stack reads empty here, the next push posts a drain.
        if (_carried is not null || Volatile.Read(ref _toSubmit) is not null)
        {
            _owner.Loop.Schedule(static s => ((UdpSender)s!).SubmitQueued(), this);
        }
    }

    /// <summary>Oldest first.</summary>
    private UdpSendOperation? TakeQueued()
    {
        UdpSendOperation? ordered = null;
        for (UdpSendOperation? taken = Interlocked.Exchange(ref _toSubmit, null); taken is not null;)
        {
            UdpSendOperation? next = taken.NextToSubmit;
            taken.NextToSubmit = ordered;
            ordered = taken;
            taken = next;
        }
        return ordered;
    }
}
