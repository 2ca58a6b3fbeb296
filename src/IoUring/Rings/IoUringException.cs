namespace IoUring.Rings;

/// <summary>An io_uring system call failed. <see cref="Errno"/> holds the kernel's error number.</summary>
public class IoUringException : Exception
{
    /// <summary>Creates the exception for a failed call.</summary>
    public IoUringException(string message, int errno) : base(message) => Errno = errno;

    /// <summary>Creates the exception with an inner exception.</summary>
    public IoUringException(string message, int errno, Exception? inner) : base(message, inner) => Errno = errno;

    /// <summary>The positive errno the kernel returned (EPERM, ENOMEM, ...).</summary>
    public int Errno { get; }

    internal static IoUringException FromErrno(string call, int errno)
        => new($"{call} failed: {ErrnoName(errno)} ({errno}): " +
            $"{System.Runtime.InteropServices.Marshal.GetPInvokeErrorMessage(errno)}", errno);

    internal static string ErrnoName(int errno) => errno switch
    {
        Interop.Errno.EPERM => "EPERM",
        Interop.Errno.ENOENT => "ENOENT",
        Interop.Errno.EINTR => "EINTR",
        Interop.Errno.EBADF => "EBADF",
        Interop.Errno.EAGAIN => "EAGAIN",
        Interop.Errno.ENOMEM => "ENOMEM",
        Interop.Errno.EBUSY => "EBUSY",
        Interop.Errno.EEXIST => "EEXIST",
        Interop.Errno.EINVAL => "EINVAL",
        Interop.Errno.ENFILE => "ENFILE",
        Interop.Errno.EMFILE => "EMFILE",
        Interop.Errno.ENOSYS => "ENOSYS",
        Interop.Errno.ENOBUFS => "ENOBUFS",
        Interop.Errno.ECANCELED => "ECANCELED",
        _ => "errno " + errno,
    };
}

/// <summary>
/// io_uring cannot be used in this process: the kernel lacks it or a required feature, it is switched off
/// (sysctl <c>kernel.io_uring_disabled</c>, a seccomp filter as in Docker's default profile), or its memory
/// could not be locked (RLIMIT_MEMLOCK). <see cref="Exception.Message"/> names the cause.
/// </summary>
public sealed class IoUringUnavailableException : IoUringException
{
    /// <summary>Creates the exception.</summary>
    public IoUringUnavailableException(string message, int errno) : base(message, errno) { }
}
