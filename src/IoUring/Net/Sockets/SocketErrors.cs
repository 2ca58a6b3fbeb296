using System.Net.Sockets;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>Linux errno values to <see cref="SocketError"/>: SocketException takes the latter, io_uring reports the
/// former.</summary>
internal static class SocketErrors
{
    public static SocketException FromErrno(int errno) => new((int)ToSocketError(errno));

    public static SocketError ToSocketError(int errno) => errno switch
    {
        Errno.EPERM or Errno.EACCES => SocketError.AccessDenied,
        Errno.ENOENT => SocketError.AddressNotAvailable,  // no Unix socket at that path
        Errno.EINTR => SocketError.Interrupted,
        Errno.EBADF => SocketError.OperationAborted,
        Errno.EAGAIN => SocketError.WouldBlock,
        Errno.ENOMEM or Errno.ENOBUFS => SocketError.NoBufferSpaceAvailable,
        Errno.EINVAL => SocketError.InvalidArgument,
        Errno.ENFILE or Errno.EMFILE => SocketError.TooManyOpenSockets,
        Errno.EPIPE => SocketError.Shutdown,
        Errno.EMSGSIZE => SocketError.MessageSize,
        Errno.EAFNOSUPPORT => SocketError.AddressFamilyNotSupported,
        Errno.EADDRINUSE => SocketError.AddressAlreadyInUse,
        Errno.EADDRNOTAVAIL => SocketError.AddressNotAvailable,
        Errno.ENETDOWN => SocketError.NetworkDown,
        Errno.ENETUNREACH => SocketError.NetworkUnreachable,
        Errno.ECONNABORTED => SocketError.ConnectionAborted,
        Errno.ECONNRESET => SocketError.ConnectionReset,
        Errno.EISCONN => SocketError.IsConnected,
        Errno.ENOTCONN => SocketError.NotConnected,
        Errno.ETIMEDOUT => SocketError.TimedOut,
        Errno.ECONNREFUSED => SocketError.ConnectionRefused,
        Errno.EHOSTDOWN => SocketError.HostDown,
        Errno.EHOSTUNREACH => SocketError.HostUnreachable,
        Errno.EALREADY => SocketError.AlreadyInProgress,
        Errno.EINPROGRESS => SocketError.InProgress,
        Errno.ECANCELED => SocketError.OperationAborted,
        _ => SocketError.SocketError,
    };
}
