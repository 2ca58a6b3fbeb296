using System.Diagnostics;
using IoUring.Interop;

namespace IoUring.Net;

// Sends from other threads reach the loop through a lock-free stack of the socket's, drained once per loop iteration.
internal sealed partial class UdpSender
{
    /// <summary>Hands a send to the loop from another thread: pushed on a lock-free stack, and the loop is posted one
    /// drain for all that gather before it runs (not a post per send). False when the loop has stopped (the sends not
    /// taken are failed).</summary>
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
                    Complete(queued, -Errno.EBADF); // a sender that went on loses its datagram, as the loop is gone
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

    /// <summary>Submits the sends queued from other threads, oldest first, as many as the SQ has room for; the rest
    /// wait for a drain at the next iteration, after the loop reaped completions (thousands in one go would submit
    /// early again and again, and with many sockets could fill the CQ).</summary>
    private void SubmitQueued()
    {
        Debug.Assert(OnLoopThread, "queued sends are submitted on the loop thread");
        // Stopping or closing, sends take no SQE (they are refused) and the ring may be gone: no room to count.
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
        // Again next iteration while sends wait: those carried (older, first), and any on the stack, whose own drain
        // may have run already in this batch and found no room. An extra drain finds nothing; if the stack reads
        // empty here, the next push posts one.
        if (_carried is not null || Volatile.Read(ref _toSubmit) is not null)
        {
            _owner.Loop.Schedule(static s => ((UdpSender)s!).SubmitQueued(), this);
        }
    }

    /// <summary>Takes every send off the stack, oldest first.</summary>
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
