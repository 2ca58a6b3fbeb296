using System.Diagnostics;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Arming and re-arming: the multishot or single-shot RECV (capped by what Input can take), the single-shot's vectored
// RECVMSG into spare blocks, the retry when the loop has no SQE, and the back-off TIMEOUT after a repeated ENOBUFS.
internal sealed partial class ConnectionReceiver
{
    // The backoff TIMEOUT's CQE: it expired, or was cancelled (closing or the loop stopping, which MaybeRearm checks).
    public void OnBackoffEnded()
    {
        _backingOff = false;
        MaybeRearm();
    }

    private bool CanArm
        => !_armed && !_backingOff && !_paused && !_ended && !_connection.IsClosing && !_owner.Loop.IsStopping;

    private unsafe void MaybeRearm()
    {
        if (CanArm && !_armRetryScheduled)
        {
            if (_singleShot && _socketNonEmpty && TryArmVectored())
            {
                return;
            }
            io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Receive);
            if (sqe == null)
            {
                RetryArmLater();
                return;
            }
            sqe->opcode = IORING_OP_RECV;
            sqe->fd = _fd;
            sqe->ioprio = (ushort)((_singleShot ? 0 : IORING_RECV_MULTISHOT) | (_bundles ? IORING_RECVSEND_BUNDLE : 0));
            sqe->flags = IOSQE_BUFFER_SELECT;
            sqe->buf_group = _owner.Loop.ReceiveBuffers.UseGroup();
            if (_singleShot)
            {
                // at most this many bytes; 0: one buffer (or bundle), when Input holds its threshold already
                sqe->len = ReceiveLimit();
            }
            else if (_pauseThreshold > 0)
            {
                // the multishot RECV's total; 0: no cap, when Input holds its threshold already
                sqe->optlen = ReceiveLimit();
            }
            Debug.Assert(!_armed, "a RECV armed while one is in flight");
            _armed = true;
            _armedTag = 0;
        }
    }

    // The SQ stayed full after an early submit (or the ring is gone): try again next iteration. Single-shot RECVs
    // re-arm after every receive, so this must not end the connection.
    private void RetryArmLater()
    {
        _armRetryScheduled = true;
        _owner.Loop.Schedule(s_retryArm, this);
    }

    /// <summary>
    /// Single-shot, when the last receive left bytes in the socket: one RECVMSG into up to <see cref="MaxVector"/>
    /// spare blocks (at most what Input can still take), so a bulk receive takes 64 KiB per request instead of one ring
    /// buffer, as a bundle would (kernels without the receive cap have no usable bundles). It completes at once (the
    /// bytes are there), so no idle connection holds blocks for it; the blocks stay the receiver's until its CQE, also
    /// when cancelled. False when it was not armed (too little room, or no block or SQE): arm a plain RECV.
    /// </summary>
    private unsafe bool TryArmVectored()
    {
        ReceiveBlockPool spares = _owner.Loop.ReceiveBuffers.Spares;
        int blockSize = spares.BlockSize;
        long limit = ReceiveLimit();
        if (limit <= blockSize)
        {
            return false; // one ring buffer holds it
        }
        int count = (int)Math.Min(MaxVector, (limit + blockSize - 1) / blockSize);
        _vectorBlocks ??= new ReceiveBlock[MaxVector];
        _vectorLengths ??= new int[MaxVector];
        int rented = 0;
        try
        {
            for (; rented < count; rented++)
            {
                _vectorBlocks[rented] = spares.Rent();
            }
        }
        catch (OutOfMemoryException)
        {
            ReturnVectorBlocks(rented);
            return false;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Receive,
            ConnectionRequestKind.VectoredTag);
        if (sqe == null)
        {
            ReturnVectorBlocks(count);
            RetryArmLater();
            return true; // nothing armed, but the retry is scheduled
        }
        if (_vectorMessage == null)
        {
            _vectorMessage =
                (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxVector * sizeof(iovec)));
        }
        var iovecs = (iovec*)(_vectorMessage + 1);
        for (int i = 0; i < count; i++)
        {
            int length = (int)Math.Min(blockSize, limit);
            limit -= length;
            iovecs[i] = new iovec { iov_base = (nuint)_vectorBlocks[i].Address, iov_len = (nuint)length };
            _vectorLengths[i] = length;
        }
        *_vectorMessage = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
        sqe->opcode = IORING_OP_RECVMSG;
        sqe->fd = _fd;
        // SAFETY: FreeNativeMemory frees _vectorMessage once the owner is freed; the blocks stay ours until this CQE.
        sqe->addr = (ulong)_vectorMessage;
        sqe->len = 1;
        _vectorCount = count;
        Debug.Assert(!_armed, "a RECVMSG armed while a receive is in flight");
        _armed = true;
        _armedTag = ConnectionRequestKind.VectoredTag;
        return true;
    }

    private void ReturnVectorBlocks(int count)
    {
        for (int i = 0; i < count; i++)
        {
            _owner.Loop.ReceiveBuffers.Spares.Return(_vectorBlocks![i]);
            _vectorBlocks[i] = default;
        }
    }

    /// <summary>Frees the vectored RECVMSG's msghdr: once nothing of the connection is in flight (the owner is
    /// freed).</summary>
    public unsafe void FreeNativeMemory()
    {
        if (_vectorMessage != null)
        {
            NativeMemory.Free(_vectorMessage);
            _vectorMessage = null;
        }
    }

    private static readonly Action<object?> s_retryArm = static r =>
    {
        var receiver = (ConnectionReceiver)r!;
        receiver._armRetryScheduled = false;
        if (receiver._owner.Loop.IsOnLoopThread)
        {
            receiver.MaybeRearm();
        }
    };

    /// <summary>
    /// What Input can still take before it pauses: the RECV ends by itself (a CQE without F_MORE) after that many
    /// bytes, and is armed again with what is left then; a receive fills at most one ring buffer past it. 0 (no cap)
    /// when Input already holds its threshold without pausing: its reader asked for more than that (ReadAtLeastAsync),
    /// and a cap of one buffer would make every receive single-shot until it has it. At most int.MaxValue: the kernel
    /// takes either as an int.
    /// </summary>
    private uint ReceiveLimit()
    {
        long room = _pauseThreshold - _input.Unconsumed;
        return room > 0 ? (uint)Math.Min(room, int.MaxValue) : 0;
    }

    private unsafe void BackOff()
    {
        if (!CanArm)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.ReceiveBackoff);
        if (sqe == null)
        {
            // No SQE for the pause: back off again next iteration (the connection must not fail for it, nor the receive
            // spin).
            _owner.Loop.RetryNextIteration(this, static r => r.BackOff());
            return;
        }
        ReceiveBackoff.Prepare(sqe);
        Debug.Assert(!_backingOff, "a second backoff TIMEOUT");
        _backingOff = true;
    }
}
