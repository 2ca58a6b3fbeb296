namespace IoUring.Interop;

#pragma warning disable CA1707 // kernel names

/// <summary>The errno values io_uring results carry (negated in <see cref="io_uring_cqe.res"/>).</summary>
public static class Errno
{
    /// <summary>Operation not permitted.</summary>
    public const int EPERM = 1;
    /// <summary>No such file or directory (cancel found no request).</summary>
    public const int ENOENT = 2;
    /// <summary>Interrupted system call.</summary>
    public const int EINTR = 4;
    /// <summary>I/O error (UDP: the route's device cannot segment a UDP_SEGMENT send).</summary>
    public const int EIO = 5;
    /// <summary>Bad file descriptor.</summary>
    public const int EBADF = 9;
    /// <summary>Try again.</summary>
    public const int EAGAIN = 11;
    /// <summary>Out of memory (for io_uring: often RLIMIT_MEMLOCK).</summary>
    public const int ENOMEM = 12;
    /// <summary>Permission denied.</summary>
    public const int EACCES = 13;
    /// <summary>Device or resource busy.</summary>
    public const int EBUSY = 16;
    /// <summary>Exists (io_uring: wrong thread for a SINGLE_ISSUER ring).</summary>
    public const int EEXIST = 17;
    /// <summary>Invalid argument.</summary>
    public const int EINVAL = 22;
    /// <summary>File table overflow.</summary>
    public const int ENFILE = 23;
    /// <summary>Too many open files.</summary>
    public const int EMFILE = 24;
    /// <summary>Broken pipe.</summary>
    public const int EPIPE = 32;
    /// <summary>Function not implemented.</summary>
    public const int ENOSYS = 38;
    /// <summary>Invalid request descriptor (io_uring: completions were dropped).</summary>
    public const int EBADR = 53;
    /// <summary>Timer expired (a TIMEOUT request fired).</summary>
    public const int ETIME = 62;
    /// <summary>Message too long (a datagram larger than the kernel sends, or a UDP segment larger than the route's
    /// MTU).</summary>
    public const int EMSGSIZE = 90;
    /// <summary>Address family not supported by protocol.</summary>
    public const int EAFNOSUPPORT = 97;
    /// <summary>Address already in use.</summary>
    public const int EADDRINUSE = 98;
    /// <summary>Cannot assign requested address.</summary>
    public const int EADDRNOTAVAIL = 99;
    /// <summary>Network is down.</summary>
    public const int ENETDOWN = 100;
    /// <summary>Network is unreachable.</summary>
    public const int ENETUNREACH = 101;
    /// <summary>Software caused connection abort.</summary>
    public const int ECONNABORTED = 103;
    /// <summary>Connection reset by peer.</summary>
    public const int ECONNRESET = 104;
    /// <summary>No buffer space available (the provided buffer ring is empty).</summary>
    public const int ENOBUFS = 105;
    /// <summary>Transport endpoint is already connected.</summary>
    public const int EISCONN = 106;
    /// <summary>Transport endpoint is not connected.</summary>
    public const int ENOTCONN = 107;
    /// <summary>Connection timed out.</summary>
    public const int ETIMEDOUT = 110;
    /// <summary>Connection refused.</summary>
    public const int ECONNREFUSED = 111;
    /// <summary>Host is down.</summary>
    public const int EHOSTDOWN = 112;
    /// <summary>No route to host.</summary>
    public const int EHOSTUNREACH = 113;
    /// <summary>Operation already in progress (cancel: it may still complete).</summary>
    public const int EALREADY = 114;
    /// <summary>Operation now in progress.</summary>
    public const int EINPROGRESS = 115;
    /// <summary>Operation canceled.</summary>
    public const int ECANCELED = 125;
}
