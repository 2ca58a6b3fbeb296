using System.Buffers;
using System.IO.Pipelines;
using System.Runtime.InteropServices;
using System.Threading.Tasks.Sources;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Sending: Output is read on the loop; all readable segments go out in one SEND (one segment) or SENDMSG (gather).
public sealed partial class IoUringConnection
{
    private const int MaxIovecs = 64;

    private ManualResetValueTaskSourceCore<int> _sendSource; // mutable struct: never readonly
    private readonly MemoryHandle[] _pins = new MemoryHandle[MaxIovecs];
    private int _pinCount;
    private unsafe Libc.msghdr* _sendMessage;   // msghdr followed by MaxIovecs iovecs; freed in OnFreed
    private bool _sendEnded;
    private long _bytesSent;

    private async Task SendLoopAsync()
    {
        // Runs on the loop: Output's reader scheduler is the loop, and sends complete inline from their CQE.
        PipeReader reader = _output.Reader;
        Exception? error = null;
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
                        reader.AdvanceTo(buffer.End);
                        error = sent is -Errno.EPIPE or -Errno.ECONNRESET
                            ? _settings.CreateResetException("Connection reset by peer.")
                            : sent == -Errno.ECANCELED ? null : new IOException($"Send failed: {IoUringException.ErrnoName(-sent)}.", SocketErrors.FromErrno(-sent));
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
        reader.Complete(error);
        EndSend(error);
    }

    private unsafe ValueTask<int> SendAsync(in ReadOnlySequence<byte> buffer)
    {
        if (_closing)
        {
            return new ValueTask<int>(-Errno.ECANCELED);
        }
        _sendSource.Reset();
        io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindSend);
        sqe->fd = _fd;
        sqe->msg_flags = Libc.MSG_NOSIGNAL;
        if (buffer.IsSingleSegment)
        {
            ReadOnlyMemory<byte> memory = buffer.First;
            _pins[0] = memory.Pin();
            _pinCount = 1;
            sqe->opcode = IORING_OP_SEND;
            sqe->addr = (ulong)_pins[0].Pointer;
            sqe->len = (uint)memory.Length;
        }
        else
        {
            if (_sendMessage == null)
            {
                _sendMessage = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxIovecs * sizeof(iovec)));
            }
            var iovecs = (iovec*)(_sendMessage + 1);
            int count = 0;
            foreach (ReadOnlyMemory<byte> segment in buffer)
            {
                if (segment.IsEmpty)
                {
                    continue;
                }
                _pins[count] = segment.Pin();
                iovecs[count] = new iovec { iov_base = (nuint)_pins[count].Pointer, iov_len = (nuint)segment.Length };
                if (++count == MaxIovecs)
                {
                    break; // the rest goes in the next send
                }
            }
            _pinCount = count;
            *_sendMessage = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
            sqe->opcode = IORING_OP_SENDMSG;
            sqe->addr = (ulong)_sendMessage;
        }
        return new ValueTask<int>(this, _sendSource.Version);
    }

    private void OnSendCompleted(int result)
    {
        for (int i = 0; i < _pinCount; i++)
        {
            _pins[i].Dispose();
        }
        _pinCount = 0;
        if (result > 0)
        {
            _bytesSent += result;
        }
        _sendSource.SetResult(result); // continues SendLoopAsync inline, which may queue the next send
    }

    private unsafe void EndSend(Exception? error)
    {
        if (error is not null || _closing)
        {
            if (!_closing)
            {
                BeginClose(error, abortive: false);
            }
            return;
        }
        // Graceful end of output: FIN after the data; the connection closes once receiving has ended too.
        io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindShutdown);
        sqe->opcode = IORING_OP_SHUTDOWN;
        sqe->fd = _fd;
        sqe->len = Libc.SHUT_WR;
    }

    private void OnShutdownCompleted()
    {
        _sendEnded = true;
        CheckBothDirectionsEnded();
    }
}
