using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Tests.Support;

/// <summary>A __kernel_timespec in native memory: it must outlive the TIMEOUT request that points at it.</summary>
internal sealed unsafe class NativeTimespec : IDisposable
{
    private __kernel_timespec* _value = (__kernel_timespec*)NativeMemory.AllocZeroed((nuint)sizeof(__kernel_timespec));

    public NativeTimespec(TimeSpan span)
    {
        _value->tv_sec = (long)span.TotalSeconds;
        _value->tv_nsec = span.Ticks % TimeSpan.TicksPerSecond * 100;
    }

    public ulong Address => (ulong)_value;

    /// <summary>A TIMEOUT request for this duration.</summary>
    public io_uring_sqe TimeoutSqe() => new() { opcode = IoUringConstants.IORING_OP_TIMEOUT, addr = Address, len = 1 };

    public void Dispose()
    {
        NativeMemory.Free(_value);
        _value = null;
    }
}
