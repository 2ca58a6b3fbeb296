using System.Buffers;
using System.Diagnostics;
using System.Numerics;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Zero-copy sends: result and notification CQEs, pin sets, fixed buffers, and the return to plain sends.
internal sealed partial class ConnectionSender
{
    /// <summary>A result (F_MORE: a notification follows), or the notification (F_NOTIF).</summary>
    public void OnZeroCopySendCompleted(int result, uint flags, uint pinSet)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        Debug.Assert((_pinSetsBusy & (1 << (int)pinSet)) != 0, "a zero-copy CQE for a pin set not in use");
        if ((flags & IORING_CQE_F_NOTIF) != 0)
        {
            if ((result & unchecked((int)IORING_NOTIF_USAGE_ZC_COPIED)) != 0)
            {
                _owner.Loop.OnZeroCopySendCopied();
                if (_zeroCopy && !_ignoreCopied)
                {
                    RevertZeroCopy(); // the kernel copied anyway: plain sends cost less
                }
            }
            _notificationsPending--;
            Debug.Assert(_notificationsPending >= 0, "more notifications than zero-copy sends");
            _owner.Loop.OnNotificationArrived();
            ReleasePinSet(pinSet);
            if (_pinSetSent[pinSet] > 0)
            {
                _output.Unpinned(_pinSetSent[pinSet]);
                _pinSetSent[pinSet] = 0;
            }
            return;
        }
        Debug.Assert(_state == SenderState.Sending, "a zero-copy send's result with no send in flight");
        _sendInFlight = 0; // the send's result: only its notification (not cancellable) may follow
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            ReleasePinSet(pinSet); // no notification will follow (the send failed early)
        }
        else
        {
            // The notification comes once the peer acknowledged the data or went away: closing does not wait for it.
            _notificationsPending++;
            _owner.Loop.OnNotificationPending();
            _pinSetSent[pinSet] = Math.Max(result, 0);
        }
        Complete(result, pinnedUntilNotification: (flags & IORING_CQE_F_MORE) != 0);
        _connection.CheckCloseProgress();
    }

    /// <summary>For good: after EINVAL, or the kernel said it copied.</summary>
    private void RevertZeroCopy()
    {
        _zeroCopy = false;
        ZeroCopyReverted = true;
    }

    /// <summary>
    /// A free pin set if every segment is our pool's (its blocks outlive Consume while pinned), else -1.
    /// <paramref name="fixedBuffer"/>: the registered buffer the segments lie in, or -1. If only the leading segments
    /// lie in one and make the threshold, <paramref name="segmentLimit"/> sends just those, fixed.
    /// </summary>
    private int RentPinSet(in UnsentBytes buffer, out int fixedBuffer, out int segmentLimit)
    {
        fixedBuffer = -1;
        segmentLimit = MaxIovecs;
        int segments = 0;
        int leading = 0;        // segments at the start that lie in the first segment's registered region
        long leadingBytes = 0;
        foreach (ReadOnlyMemory<byte> segment in buffer)
        {
            if (segment.IsEmpty)
            {
                continue; // as in Submit: counted alike, so segmentLimit means the same there
            }
            if (!MemoryMarshal.TryGetMemoryManager(segment, out PinnedBlock? block))
            {
                return -1;
            }
            int index = _owner.Loop.RegisteredBufferIndex(block);
            if (segments == 0)
            {
                fixedBuffer = index;
            }
            if (leading == segments && index >= 0 && index == fixedBuffer)
            {
                leading++;
                leadingBytes += segment.Length;
            }
            if (++segments == MaxIovecs)
            {
                break; // the rest goes in the next send
            }
        }
        if (leading < segments)
        {
            // Without fixed gathers one unfixed gather beats a single fixed segment per send.
            bool prefixWorthIt = _fixedGather && leading > 0 && leadingBytes >= _settings.ZeroCopySendThreshold;
            if (prefixWorthIt)
            {
                segmentLimit = leading;
            }
            else
            {
                fixedBuffer = -1;
            }
        }
        if (_pinSets.Length == 0)
        {
            _pinSets = new MemoryHandle[PinSets][];
            _pinSetCounts = new int[PinSets];
            _pinSetSent = new int[PinSets];
            for (int i = 0; i < PinSets; i++)
            {
                _pinSets[i] = new MemoryHandle[MaxIovecs];
            }
        }
        int free = ~_pinSetsBusy & ((1 << PinSets) - 1);
        if (free == 0)
        {
            segmentLimit = MaxIovecs; // a plain send instead: no reason to stop at a region's end
            fixedBuffer = -1;
            return -1;
        }
        int set = BitOperations.TrailingZeroCount(free);
        _pinSetsBusy |= 1 << set;
        return set;
    }

    private void ReleasePinSet(uint set)
    {
        Debug.Assert((_pinSetsBusy & (1 << (int)set)) != 0, "a pin set released twice");
        ReleasePins(_pinSets[set], _pinSetCounts[set]);
        _pinSetCounts[set] = 0;
        _pinSetsBusy &= ~(1 << (int)set);
    }
}
