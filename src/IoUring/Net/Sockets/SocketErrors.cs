using System.Net.Sockets;

namespace IoUring.Net;

/// <summary>Linux errno values to <see cref="SocketError"/>: SocketException takes the latter, io_uring reports the
/// former.</summary>
internal static class SocketErrors
{
    public static SocketException FromErrno(int errno) => new((int)ToSocketError(errno));

    public static SocketError ToSocketError(int errno) => errno switch
    {
        1 or 13 => SocketError.AccessDenied,            // EPERM, EACCES
        2 => SocketError.AddressNotAvailable,           // ENOENT: no Unix socket at that path
        4 => SocketError.Interrupted,                   // EINTR
        9 => SocketError.OperationAborted,              // EBADF
        11 => SocketError.WouldBlock,                   // EAGAIN
        12 or 105 => SocketError.NoBufferSpaceAvailable, // ENOMEM, ENOBUFS
        22 => SocketError.InvalidArgument,              // EINVAL
        23 or 24 => SocketError.TooManyOpenSockets,     // ENFILE, EMFILE
        32 => SocketError.Shutdown,                     // EPIPE
        90 => SocketError.MessageSize,                  // EMSGSIZE
        97 => SocketError.AddressFamilyNotSupported,    // EAFNOSUPPORT
        98 => SocketError.AddressAlreadyInUse,          // EADDRINUSE
        99 => SocketError.AddressNotAvailable,          // EADDRNOTAVAIL
        100 => SocketError.NetworkDown,                 // ENETDOWN
        101 => SocketError.NetworkUnreachable,          // ENETUNREACH
        103 => SocketError.ConnectionAborted,           // ECONNABORTED
        104 => SocketError.ConnectionReset,             // ECONNRESET
        106 => SocketError.IsConnected,                 // EISCONN
        107 => SocketError.NotConnected,                // ENOTCONN
        110 => SocketError.TimedOut,                    // ETIMEDOUT
        111 => SocketError.ConnectionRefused,           // ECONNREFUSED
        112 => SocketError.HostDown,                    // EHOSTDOWN
        113 => SocketError.HostUnreachable,             // EHOSTUNREACH
        114 => SocketError.AlreadyInProgress,           // EALREADY
        115 => SocketError.InProgress,                  // EINPROGRESS
        125 => SocketError.OperationAborted,            // ECANCELED
        _ => SocketError.SocketError,
    };
}
