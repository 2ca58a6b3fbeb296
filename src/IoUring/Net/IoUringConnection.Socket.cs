using System.Net.Sockets;
using IoUring.Interop;

namespace IoUring.Net;

// The Socket handed to applications (Kestrel's IConnectionSocketFeature). It wraps a duplicate of the fd, owned by its
// SafeSocketHandle: that number stays the Socket's until no call through it is in progress, whereas the connection's
// own number is closed through the ring and may belong to another socket right after.
public sealed partial class IoUringConnection
{
    private Socket? _socket;        // under the _closed lock
    private bool _fdReleased;       // under the _closed lock: no new Socket

    /// <summary>
    /// A <see cref="System.Net.Sockets.Socket"/> for socket options and addresses, made on first use. It wraps a
    /// duplicate of <see cref="FileDescriptor"/> (so its fd number cannot be reused while a call through it runs) and
    /// is disposed when the connection closes: from then on calls through it throw
    /// <see cref="ObjectDisposedException"/>. Disposing it does not close the connection; reading or writing through it
    /// bypasses <see cref="Input"/> and <see cref="Output"/>.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The connection has closed.</exception>
    public Socket Socket
    {
        get
        {
            lock (_closed)
            {
                ObjectDisposedException.ThrowIf(_fdReleased, this);
                if (_socket is null)
                {
                    int fd = Libc.fcntl(_fd, Libc.F_DUPFD_CLOEXEC, 0);
                    if (fd < 0)
                    {
                        throw SocketErrors.FromErrno(Libc.GetLastErrno());
                    }
                    // The handle owns the duplicate from here on: if the Socket cannot be made, disposing the handle is
                    // the one close (a close(fd) here as well would let the handle's finalizer close the number again,
                    // by then perhaps another socket's).
                    var handle = new SafeSocketHandle(fd, ownsHandle: true);
                    try
                    {
                        _socket = new Socket(handle);
                    }
                    catch
                    {
                        handle.Dispose();
                        throw;
                    }
                }
                return _socket;
            }
        }
    }

    /// <summary>
    /// Before the connection's fd is closed (loop thread): no new Socket, and the one handed out is disposed, which
    /// closes its duplicate once no call through it is in progress (Socket.Dispose waits for those).
    /// </summary>
    private void ReleaseSocket()
    {
        Socket? socket;
        lock (_closed)
        {
            _fdReleased = true;
            socket = _socket;
        }
        if (socket is null)
        {
            return;
        }
        try
        {
            if (!_abortiveClose)
            {
                // FIN was sent already; this tells the Socket so, so that its close stays graceful (no RST) even if
                // it has to interrupt a call or cancel an operation the application started through it.
                socket.Shutdown(SocketShutdown.Send);
            }
        }
        catch (SocketException)
        {
            // already closed by the peer
        }
        catch (ObjectDisposedException)
        {
            // the application disposed it
        }
        try
        {
            socket.Dispose();
        }
        catch (Exception ex)
        {
            // The loop goes on closing the connection whatever the Socket's teardown throws.
            _owner.Loop.ReportUnhandled(ex);
        }
    }
}
