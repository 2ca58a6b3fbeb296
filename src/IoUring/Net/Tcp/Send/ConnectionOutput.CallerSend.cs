using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Sends from the flushing (caller's) thread: a flush that finds the sender waiting while the loop sleeps sends the
// bytes itself, in one non-blocking send(2) or sendmsg(2), instead of waking the loop.
internal sealed partial class ConnectionOutput
{
    /// <summary>
    /// Under the lock, in a flush that found the sender waiting for bytes (no send in flight, none posted) and took
    /// that from it: while the loop sleeps, posting the sender would cost an eventfd write, a wake-up and a loop
    /// iteration before the bytes go (for a request/response exchange, that on every message), so a flush of at most
    /// the caller-send limit sends them from this thread instead, in one non-blocking send(2), as a socket's send does.
    /// Safe here: the sender cannot send meanwhile (the lock; it waits to be posted), and the fd stays open (it is
    /// closed only after <see cref="CompleteSender"/>, which takes the lock, and none is attempted after it).
    /// </summary>
    /// <returns>What to post to the loop: null when every flushed byte went (the sender waits again); the sender's
    /// <see cref="ConnectionSender.OnOutputFlushed"/> for what is left (not tried: the loop is awake, so it batches; a
    /// partial send; EAGAIN); <see cref="ConnectionSender.OnCallerSendFailed"/> for an error, which the sender then
    /// handles as its own send's.</returns>
    private Action<object?>? SendFromCaller()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (_callerSendLimit == 0)
        {
            return s_onFlushed; // caller sends are off (TestHooks.NoCallerSends)
        }
        long length = _committed - _sent;
        // _callerSendLimit keeps what is large enough to go zero-copy for the ring; that reason is gone for a borrowed
        // write (never zero-copy) and where the sender does not send zero-copy (it stopped because the kernel copied,
        // as over loopback; or never could: a Unix socket, a pool whose blocks are not pinned, a kernel without
        // SEND_ZC).
        long limit = _borrowing || !_sender!.MaySendZeroCopy ? MaxCallerSend : _callerSendLimit;
        // Not once the application aborted: the loop has yet to close, and what is flushed now is to be dropped.
        if (length > limit || !_loop.IsSleeping || _loop.IsOnLoopThread || _sender!.AbortRequested || MoreSendsLikely())
        {
            return s_onFlushed;
        }
        // a borrowed write's memory: read only during this call
        var bytes = new SendableBytes(_head!, _headIndex, length, _borrowing);
        byte opcode = bytes.IsSingleSegment ? IORING_OP_SEND : IORING_OP_SENDMSG;
        int fault = _loop.Faults?.TakeCallerSendFault(opcode) ?? 0;
        long sent;
        int errno = 0;
        if (fault != 0)
        {
            sent = -1;
            errno = fault;
        }
        else
        {
            try
            {
                sent = bytes.IsSingleSegment ? SendSingle(length, out errno) : SendGather(bytes, out errno);
            }
            catch (Exception)
            {
                // A lent write's memory (its MemoryManager's GetSpan or Pin) threw: the flush must not throw with the
                // sender no longer waiting to be posted, so the ring's sender takes the bytes, and fails the connection
                // with the error if it cannot send them either, as for any send of its own.
                return s_onFlushed;
            }
        }
        if (sent < 0)
        {
            if (errno is Errno.EAGAIN or Errno.EINTR)
            {
                _callerSendsCutShort++;
                return s_onFlushed; // the socket's buffer is full: the ring's send waits for room
            }
            _sender!.CallerSendError = errno;
            return s_onCallerSendFailed;
        }
        _sent += sent;
        _bytesSentByCallers += sent;
        _loop.OnCallerSend((int)sent);
        ReleaseSent();
        if (_sent < _committed)
        {
            _callerSendsCutShort++;
            return s_onFlushed;
        }
        _senderWaiting = true; // as before the flush: nothing to send, the next commit posts or sends again
        return null;
    }

    /// <summary>
    /// Whether more flushes are likely before the loop would take this one: then posting costs one wake-up for all of
    /// them and the loop submits their sends together, where each flush sending itself would cost a system call apiece
    /// (sending from every flush lost to posting under Kestrel, most with pipelined requests:
    /// docs/benchmarks/log/2026-11-25-connections.md). More are likely when the thread pool has work queued
    /// (other connections' requests, whose flushes come next; the loop's wake queued behind them gathers them) or when
    /// this connection's reader has bytes it has not consumed (pipelined requests, each answered with a flush).
    /// </summary>
    private bool MoreSendsLikely() => _input!.MayHaveUnconsumed || ThreadPool.PendingWorkItemCount != 0;

    /// <summary>send(2) of the <paramref name="length"/> bytes from the head block on (all in it).</summary>
    private unsafe long SendSingle(long length, out int errno)
    {
        ReadOnlySpan<byte> span = _head!.Memory.Span.Slice(_headIndex, (int)length);
        long sent;
        fixed (byte* pointer = span)
        {
            sent = Libc.send(_fd, pointer, (nuint)span.Length, Libc.MSG_DONTWAIT | (int)Libc.MSG_NOSIGNAL);
        }
        errno = sent < 0 ? Libc.GetLastErrno() : 0;
        return sent;
    }

    /// <summary>sendmsg(2) of up to <see cref="MaxCallerSendSegments"/> of the segments (the rest: the ring's next
    /// send).</summary>
    private unsafe long SendGather(in SendableBytes bytes, out int errno)
    {
        CallerSendPins pins = default;
        iovec* iovecs = stackalloc iovec[MaxCallerSendSegments];
        int count = 0;
        try
        {
            foreach (ReadOnlyMemory<byte> segment in bytes)
            {
                if (segment.IsEmpty)
                {
                    continue;
                }
                pins[count] = segment.Pin();
                iovecs[count] = new iovec { iov_base = (nuint)pins[count].Pointer, iov_len = (nuint)segment.Length };
                if (++count == MaxCallerSendSegments)
                {
                    break;
                }
            }
            Libc.msghdr message = new() { msg_iov = iovecs, msg_iovlen = (nuint)count };
            long sent = Libc.sendmsg(_fd, &message, Libc.MSG_DONTWAIT | (int)Libc.MSG_NOSIGNAL);
            errno = sent < 0 ? Libc.GetLastErrno() : 0;
            return sent;
        }
        finally
        {
            for (int i = 0; i < count; i++)
            {
                pins[i].Dispose();
            }
        }
    }
}
