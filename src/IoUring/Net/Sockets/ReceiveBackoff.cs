using System.Diagnostics;
using System.Runtime.InteropServices;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The pause before a receive re-arms when its buffer ring stays empty (ENOBUFS with no buffer given back since the
/// last one): a TIMEOUT, so an empty ring costs a re-arm per 10 ms, never a busy loop.
/// </summary>
internal static unsafe class ReceiveBackoff
{
    private static readonly __kernel_timespec* s_timeout = NewTimespec(TimeSpan.FromMilliseconds(10));

    public static void Prepare(io_uring_sqe* sqe)
    {
        Debug.Assert(sqe->opcode == 0 && sqe->addr == 0, "the backoff TIMEOUT prepared over a used SQE");
        sqe->opcode = IORING_OP_TIMEOUT;
        // SAFETY: s_timeout is allocated once for the process and never freed.
        sqe->addr = (ulong)s_timeout;
        sqe->len = 1;
    }

    private static __kernel_timespec* NewTimespec(TimeSpan span)
    {
        var value = (__kernel_timespec*)NativeMemory.AllocZeroed((nuint)sizeof(__kernel_timespec));
        value->tv_nsec = span.Ticks * 100;
        return value;
    }
}
