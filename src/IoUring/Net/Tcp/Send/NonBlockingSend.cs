using System.Runtime.Versioning;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>A flushing thread's own send of flushed bytes (<see cref="ConnectionOutput"/>'s caller sends): one
/// non-blocking send(2) for one segment, sendmsg(2) for several.</summary>
[SupportedOSPlatform("linux")]
internal static class NonBlockingSend
{
    /// <summary>Up to <see cref="ConnectionOutput.MaxCallerSendSegments"/> segments; -1 with
    /// <paramref name="errno"/> on an error.</summary>
    public static long Send(int fd, in UnsentBytes bytes, out int errno)
        => bytes.IsSingleSegment ? SendSingle(fd, bytes, out errno) : SendGather(fd, bytes, out errno);

    private static unsafe long SendSingle(int fd, in UnsentBytes bytes, out int errno)
    {
        ReadOnlySpan<byte> span = bytes.SingleSegmentSpan;
        long sent;
        // SAFETY: fixed pins the span for the synchronous call; the output's lock keeps the blocks until it returns.
        fixed (byte* pointer = span)
        {
            sent = Libc.send(fd, pointer, (nuint)span.Length, Libc.MSG_DONTWAIT | (int)Libc.MSG_NOSIGNAL);
        }
        errno = sent < 0 ? Libc.GetLastErrno() : 0;
        return sent;
    }

    private static unsafe long SendGather(int fd, in UnsentBytes bytes, out int errno)
    {
        NonBlockingSendPins pins = default;
        iovec* iovecs = stackalloc iovec[ConnectionOutput.MaxCallerSendSegments];
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
                if (++count == ConnectionOutput.MaxCallerSendSegments)
                {
                    break;
                }
            }
            Libc.msghdr message = new() { msg_iov = iovecs, msg_iovlen = (nuint)count };
            // SAFETY: the iovecs and msghdr are on this stack, the segments pinned until the finally, after the call.
            long sent = Libc.sendmsg(fd, &message, Libc.MSG_DONTWAIT | (int)Libc.MSG_NOSIGNAL);
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
