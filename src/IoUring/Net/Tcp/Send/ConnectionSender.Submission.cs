using System.Buffers;
using System.Diagnostics;
using System.Runtime.InteropServices;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// One send's SQE and pins, the plain send's completion, its cancel at close, and the gather message.
internal sealed partial class ConnectionSender
{
    private unsafe void Submit(in UnsentBytes buffer)
    {
        Debug.Assert(_state == SenderState.Idle && _sendInFlight == 0, "a send submitted with another in flight");
        // Made at the first gather: many connections never need it.
        if (_message == null && !buffer.IsSingleSegment)
        {
            _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxIovecs * sizeof(iovec)));
        }

        int pinSet = -1;
        int fixedBuffer = -1;
        int segmentLimit = MaxIovecs;
        bool copy = _copyNextSend;
        _copyNextSend = false;
        if (_zeroCopy && !copy && !buffer.Borrowed && buffer.Length >= _settings.ZeroCopySendThreshold
            && (_zeroCopyGather || buffer.IsSingleSegment))
        {
            pinSet = RentPinSet(buffer, out fixedBuffer, out segmentLimit);
        }
        _lastSendZeroCopy = pinSet >= 0;

        MemoryHandle[]? pins = pinSet >= 0 ? _pinSets[pinSet]
            : buffer.IsSingleSegment ? null
            : _pins.Length == 0 ? _pins = new MemoryHandle[MaxIovecs] : _pins;
        iovec single; // a single segment goes in the SQE itself (SEND), so its iovec only lives until then
        iovec* iovecs = buffer.IsSingleSegment ? &single : (iovec*)(_message + 1);
        int count = 0;
        io_uring_sqe* sqe;
        try
        {
            foreach (ReadOnlyMemory<byte> segment in buffer)
            {
                if (segment.IsEmpty)
                {
                    continue;
                }
                MemoryHandle pin = segment.Pin(); // a borrowed write's MemoryManager may throw
                if (pins is null)
                {
                    _singlePin = pin;
                }
                else
                {
                    pins[count] = pin;
                }
                iovecs[count] = new iovec { iov_base = (nuint)pin.Pointer, iov_len = (nuint)segment.Length };
                if (++count == segmentLimit)
                {
                    break; // the rest goes in the next send
                }
            }
            // The SQE after the pins: if either throws (a Pin, or the loop has no SQE), nothing was submitted.
            sqe = pinSet >= 0
                ? _owner.Loop.NewSqe(_owner, ConnectionRequestKind.SendZeroCopy, (uint)pinSet)
                : _owner.Loop.NewSqe(_owner, ConnectionRequestKind.Send);
        }
        catch
        {
            // Nothing will read the memory: unpin now.
            if (pinSet >= 0)
            {
                _pinSetCounts[pinSet] = count;
                ReleasePinSet((uint)pinSet);
            }
            else if (pins is not null)
            {
                ReleasePins(pins, count);
            }
            else if (count == 1)
            {
                _singlePin.Dispose();
            }
            throw;
        }

        if (pinSet >= 0)
        {
            _pinSetCounts[pinSet] = count;
            _sendInFlight = _owner.UserDataOf(ConnectionRequestKind.SendZeroCopy, (uint)pinSet);
            sqe->ioprio = _zeroCopyFlags;
            if (fixedBuffer >= 0 && (count == 1 || _fixedGather))
            {
                // Every segment lies in this registered buffer: the kernel need not pin its pages.
                sqe->ioprio |= IORING_RECVSEND_FIXED_BUF;
                sqe->buf_index = (ushort)fixedBuffer;
            }
            else
            {
                fixedBuffer = -1;
            }
            ZeroCopySends++;
            _owner.Loop.OnZeroCopySend(fixedBuffer >= 0);
        }
        else
        {
            _pinCount = count;
            _pinsInArray = pins is not null;
            _sendInFlight = _owner.UserDataOf(ConnectionRequestKind.Send);
        }
        sqe->fd = _fd;
        sqe->msg_flags = Libc.MSG_NOSIGNAL;
        if (count == 1)
        {
            sqe->opcode = pinSet >= 0 ? IORING_OP_SEND_ZC : IORING_OP_SEND;
            // SAFETY: the blocks stay pinned until this send's CQE (a zero-copy send's: its notification), and Output
            // keeps them until Consume after it.
            sqe->addr = iovecs[0].iov_base;
            sqe->len = (uint)iovecs[0].iov_len;
        }
        else
        {
            *_message = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
            sqe->opcode = pinSet >= 0 ? IORING_OP_SENDMSG_ZC : IORING_OP_SENDMSG;
            // SAFETY: _message and its iovecs live until FreeNativeMemory, once nothing is in flight; the blocks stay
            // pinned until the CQE (zero-copy: the notification).
            sqe->addr = (ulong)_message;
        }
    }

    /// <summary>The send may wait for room the peer never makes. False when the loop had no SQE: call again.</summary>
    public bool CancelForClose()
        => (_sendInFlight == 0 || _connection.CancelRequest(_sendInFlight)) & CancelFileForClose();

    public void OnSendCompleted(int result)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        Debug.Assert(_state == SenderState.Sending, "a send's CQE with no send in flight");
        _sendInFlight = 0;
        if (_pinsInArray)
        {
            ReleasePins(_pins, _pinCount);
        }
        else if (_pinCount == 1)
        {
            _singlePin.Dispose();
        }
        _pinCount = 0;
        Complete(result);
    }

    /// <summary>Once nothing is in flight.</summary>
    public unsafe void FreeNativeMemory()
    {
        if (_message != null)
        {
            NativeMemory.Free(_message);
            _message = null;
        }
    }

    private static void ReleasePins(MemoryHandle[] pins, int count)
    {
        for (int i = 0; i < count; i++)
        {
            pins[i].Dispose();
        }
    }
}
