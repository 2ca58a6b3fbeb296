using System.Buffers;
using System.Runtime.InteropServices;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Zero-copy bookkeeping: which sends still hold memory, and what their notifications said.
public sealed partial class IoUringConnection
{
    /// <summary>Sends made with SEND_ZC/SENDMSG_ZC.</summary>
    public int ZeroCopySends { get; private set; }

    /// <summary>
    /// True once the connection went back to plain sends: the kernel reported that a zero-copy send was copied after all,
    /// or refused one (EINVAL: a kernel without a feature it needs), which was then sent again plainly.
    /// </summary>
    public bool ZeroCopyReverted { get; private set; }

    // Unix domain sockets have no zero-copy send (EOPNOTSUPP).
    private void InitializeZeroCopy()
    {
        IoUringCapabilities caps = _settings.Capabilities;
        _zeroCopy = _isTcp && _settings.ZeroCopySendThreshold is > 0 and < long.MaxValue
            && _settings.MemoryPool is PinnedBlockMemoryPool
            && caps.HasZeroCopySend;
        // Without SENDMSG_ZC (6.0) only single-segment sends go zero-copy. Without REPORT_USAGE (before 6.2) the kernel
        // cannot say it copied, so a connection over loopback keeps paying for zero-copy: correct, only slower.
        _zeroCopyGather = caps.HasZeroCopySendMsg;
        _zeroCopyFlags = caps.HasZeroCopyReportUsage ? IORING_SEND_ZC_REPORT_USAGE : (ushort)0;
    }

    /// <summary>A zero-copy send failed with EINVAL: back to plain sends for good (the caller sends the same bytes again).</summary>
    private void RevertZeroCopy()
    {
        _zeroCopy = false;
        ZeroCopyReverted = true;
    }

    /// <summary>A free slot, if every segment to send comes from our pool (whose blocks outlive AdvanceTo while pinned); else -1.</summary>
    private int RentZeroCopySlot(in ReadOnlySequence<byte> buffer)
    {
        int segments = 0;
        foreach (ReadOnlyMemory<byte> segment in buffer)
        {
            if (!MemoryMarshal.TryGetMemoryManager(segment, out PinnedBlockMemoryPool.Block? _) || ++segments == MaxIovecs)
            {
                if (segments != MaxIovecs)
                {
                    return -1;
                }
                break;
            }
        }
        if (_zeroCopyPins.Length == 0)
        {
            _zeroCopyPins = new MemoryHandle[ZeroCopySlots][];
            _zeroCopyPinCounts = new int[ZeroCopySlots];
            for (int i = 0; i < ZeroCopySlots; i++)
            {
                _zeroCopyPins[i] = new MemoryHandle[MaxIovecs];
            }
        }
        int free = ~_zeroCopyBusy & ((1 << ZeroCopySlots) - 1);
        if (free == 0)
        {
            return -1;
        }
        int slot = System.Numerics.BitOperations.TrailingZeroCount(free);
        _zeroCopyBusy |= 1 << slot;
        return slot;
    }

    private void OnZeroCopySendCompleted(int result, uint flags, uint slot)
    {
        if ((flags & IORING_CQE_F_NOTIF) != 0)
        {
            // The kernel is done with the memory.
            if ((result & unchecked((int)IORING_NOTIF_USAGE_ZC_COPIED)) != 0 && _zeroCopy)
            {
                _zeroCopy = false;
                ZeroCopyReverted = true;
            }
            _notificationsPending--;
            _owner.Loop.OnNotificationArrived();
            ReleaseZeroCopySlot(slot);
            return;
        }
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            ReleaseZeroCopySlot(slot); // no notification will follow (the send failed early)
        }
        else
        {
            // The request is done with the socket; only its memory waits for the notification, which may come only
            // once the peer acknowledged the data or went away. So neither closing nor the loop's stop waits for it.
            _notificationsPending++;
            _owner.Loop.OnNotificationPending();
        }
        CompleteSend(result);
        CheckCloseProgress();
    }

    private void ReleaseZeroCopySlot(uint slot)
    {
        ReleasePins(_zeroCopyPins[slot], _zeroCopyPinCounts[slot]);
        _zeroCopyPinCounts[slot] = 0;
        _zeroCopyBusy &= ~(1 << (int)slot);
    }
}
