using System.Buffers;
using System.IO.Pipelines;
using System.Runtime.InteropServices;
using System.Threading.Tasks.Sources;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Sending: Output is read on the loop; all readable segments go out in one SEND (one segment) or SENDMSG (gather).
// Large sends use SEND_ZC/SENDMSG_ZC: the result CQE continues the send loop at once, the memory stays pinned until
// the later notification CQE, and if the kernel reports it copied anyway (loopback) the connection returns to plain sends.
public sealed partial class IoUringConnection
{
    private const int MaxIovecs = 64;
    private const int ZeroCopySlots = 8; // zero-copy sends whose notification may be outstanding at once

    private ManualResetValueTaskSourceCore<int> _sendSource; // mutable struct: never readonly
    private MemoryHandle[] _pins = [];         // grown on first use: most connections only ever send one segment
    private int _pinCount;
    private unsafe Libc.msghdr* _sendMessage;   // msghdr followed by MaxIovecs iovecs, made on first gather; freed in OnFreed
    private bool _sendEnded;
    private bool _zeroCopy;                     // this connection still tries SEND_ZC (off once the kernel reports it copied)
    private bool _zeroCopyGather;               // SENDMSG_ZC is available (6.1+)
    private ushort _zeroCopyFlags;              // IORING_SEND_ZC_REPORT_USAGE where the kernel has it (6.2+)
    private bool _lastSendZeroCopy;
    private MemoryHandle[][] _zeroCopyPins = [];  // per slot: memory held until that send's notification
    private int[] _zeroCopyPinCounts = [];
    private int _zeroCopyBusy;                  // bit per slot awaiting its notification
    private int _notificationsPending;          // zero-copy sends done with the socket, still holding memory
    private long _bytesSent;

    private async Task SendLoopAsync()
    {
        // Runs on the loop: Output's reader scheduler is the loop, and sends complete inline from their CQE.
        PipeReader reader = _output.Reader;
        Exception? error = null;
        bool peerReset = false;
        try
        {
            while (true)
            {
                ReadResult result = await reader.ReadAsync().ConfigureAwait(false);
                if (result.IsCanceled)
                {
                    break; // closing
                }
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (!buffer.IsEmpty)
                {
                    int sent = await SendAsync(buffer).ConfigureAwait(false);
                    if (sent < 0)
                    {
                        if (sent == -Errno.EINVAL && _lastSendZeroCopy && !_closing)
                        {
                            // The kernel refused the zero-copy send itself (a flag or opcode it lacks): nothing was sent.
                            RevertZeroCopy();
                            reader.AdvanceTo(buffer.Start);
                            continue;
                        }
                        if (sent is -Errno.EAGAIN or -Errno.EINTR or -Errno.ENOBUFS && !_closing)
                        {
                            reader.AdvanceTo(buffer.Start); // transient: nothing was sent, send the same bytes again
                            continue;
                        }
                        reader.AdvanceTo(buffer.End);
                        peerReset = sent is -Errno.EPIPE or -Errno.ECONNRESET;
                        error = sent switch
                        {
                            -Errno.ECANCELED when _closing => null,
                            -Errno.EPIPE or -Errno.ECONNRESET => _settings.CreateResetException("Connection reset by peer."),
                            _ => new IOException($"Send failed: {IoUringException.ErrnoName(-sent)}.", SocketErrors.FromErrno(-sent)),
                        };
                        break;
                    }
                    // After the completion, never before: the kernel read these bytes until now.
                    reader.AdvanceTo(buffer.GetPosition(sent));
                    if (sent < buffer.Length)
                    {
                        continue; // partial send: the rest is readable at once
                    }
                }
                else
                {
                    reader.AdvanceTo(buffer.End);
                }
                if (result.IsCompleted)
                {
                    break;
                }
            }
        }
        catch (Exception ex)
        {
            error = ex;
        }
        // A peer that reset or stopped reading is not the application's fault: its writes see the output completed
        // (FlushResult.IsCompleted), as with Kestrel's Sockets transport, instead of an exception Kestrel logs as an
        // application error. The input still reports the reset, and the connection still closes abortively.
        reader.Complete(peerReset ? null : error);
        EndSend(error);
    }

    private unsafe ValueTask<int> SendAsync(in ReadOnlySequence<byte> buffer)
    {
        if (_closing)
        {
            return new ValueTask<int>(-Errno.ECANCELED);
        }
        _sendSource.Reset();
        // The msghdr (~1 KiB) is made for the first gather send only: many connections (an idle keep-alive one, or a
        // response written in one piece) never need it, and it would be resident memory for each.
        if (_sendMessage == null && !buffer.IsSingleSegment)
        {
            _sendMessage = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxIovecs * sizeof(iovec)));
        }

        // Zero-copy pays off only for large sends, and only when the memory can be held past AdvanceTo
        // (our pool's blocks stay alive while pinned) until the kernel's notification says it is done with it.
        int zeroCopySlot = -1;
        if (_pins.Length < MaxIovecs && !(buffer.IsSingleSegment && _pins.Length == 1))
        {
            _pins = new MemoryHandle[buffer.IsSingleSegment ? 1 : MaxIovecs];
        }
        MemoryHandle[] pins = _pins;
        if (_zeroCopy && buffer.Length >= _settings.ZeroCopySendThreshold && (_zeroCopyGather || buffer.IsSingleSegment)
            && (zeroCopySlot = RentZeroCopySlot(buffer)) >= 0)
        {
            pins = _zeroCopyPins[zeroCopySlot];
        }
        _lastSendZeroCopy = zeroCopySlot >= 0;

        iovec single; // a single segment goes in the SQE itself (SEND), so its iovec only lives until then
        iovec* iovecs = buffer.IsSingleSegment ? &single : (iovec*)(_sendMessage + 1);
        int count = 0;
        foreach (ReadOnlyMemory<byte> segment in buffer)
        {
            if (segment.IsEmpty)
            {
                continue;
            }
            pins[count] = segment.Pin();
            iovecs[count] = new iovec { iov_base = (nuint)pins[count].Pointer, iov_len = (nuint)segment.Length };
            if (++count == MaxIovecs)
            {
                break; // the rest goes in the next send
            }
        }

        io_uring_sqe* sqe;
        if (zeroCopySlot >= 0)
        {
            _zeroCopyPinCounts[zeroCopySlot] = count;
            sqe = _owner.Loop.GetSqe(_owner, KindSendZeroCopy, (uint)zeroCopySlot);
            sqe->ioprio = _zeroCopyFlags;
            ZeroCopySends++;
        }
        else
        {
            _pinCount = count;
            sqe = _owner.Loop.GetSqe(_owner, KindSend);
        }
        sqe->fd = _fd;
        sqe->msg_flags = Libc.MSG_NOSIGNAL;
        if (count == 1)
        {
            sqe->opcode = zeroCopySlot >= 0 ? IORING_OP_SEND_ZC : IORING_OP_SEND;
            sqe->addr = iovecs[0].iov_base;
            sqe->len = (uint)iovecs[0].iov_len;
        }
        else
        {
            *_sendMessage = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
            sqe->opcode = zeroCopySlot >= 0 ? IORING_OP_SENDMSG_ZC : IORING_OP_SENDMSG;
            sqe->addr = (ulong)_sendMessage;
        }
        return new ValueTask<int>(this, _sendSource.Version);
    }

    private void OnSendCompleted(int result)
    {
        ReleasePins(_pins, _pinCount);
        _pinCount = 0;
        CompleteSend(result);
    }

    private void CompleteSend(int result)
    {
        if (result > 0)
        {
            _bytesSent += result;
        }
        _sendSource.SetResult(result); // continues SendLoopAsync inline, which may queue the next send
    }

    private static void ReleasePins(MemoryHandle[] pins, int count)
    {
        for (int i = 0; i < count; i++)
        {
            pins[i].Dispose();
        }
    }

    private unsafe void EndSend(Exception? error)
    {
        if (error is not null || _closing)
        {
            if (!_closing)
            {
                BeginClose(error, abortive: true); // the peer must not mistake a failed stream for a complete one
            }
            return;
        }
        // Graceful end of output: FIN after the data; the connection closes once receiving has ended too.
        // A direct shutdown(2), not IORING_OP_SHUTDOWN: the kernel always hands that opcode to an io-wq worker thread
        // (under connection churn a worker wake-up per connection, 12% of the CPU), and shutting down the sending side
        // of a socket only queues the FIN, it never blocks. A failure (the peer reset first) changes nothing here: the
        // connection closes either way.
        _ = Libc.shutdown(_fd, Libc.SHUT_WR);
        _sendEnded = true;
        CheckBothDirectionsEnded();
    }
}

