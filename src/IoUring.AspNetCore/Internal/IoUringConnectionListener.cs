using System.Net;
using System.Runtime.Versioning;
using IoUring.Net;
using Microsoft.AspNetCore.Connections;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// Kestrel's view of an <see cref="IoUringListener"/>: every loop accepts on the socket (multishot ACCEPT) and
/// <see cref="AcceptAsync"/> hands the connections out. Kestrel stops it as Unbind, wait for the accept loop, close
/// the connections, abort those left, Dispose; connections stay open through Unbind and Dispose.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class IoUringConnectionListener : IConnectionListener
{
    private readonly IoUringListener _listener;
    private readonly IoUringTransport _transport;

    public IoUringConnectionListener(IoUringListener listener, IoUringTransport transport)
    {
        _listener = listener;
        _transport = transport;
    }

    /// <summary>The bound endpoint, with the port the kernel chose when asked for port 0.</summary>
    public EndPoint EndPoint => _listener.LocalEndPoint;

    public async ValueTask<ConnectionContext?> AcceptAsync(CancellationToken cancellationToken = default)
    {
        IoUringConnection? connection = await _listener.AcceptAsync(cancellationToken).ConfigureAwait(false);
        return connection is null ? null : _transport.CreateContext(connection);
    }

    /// <summary>
    /// Stops accepting and closes the listening socket, so that clients connecting during Kestrel's graceful drain
    /// are refused at once (as with the Sockets transport) instead of waiting in a backlog nobody accepts from.
    /// </summary>
    public ValueTask UnbindAsync(CancellationToken cancellationToken = default) => _listener.DisposeAsync();

    public ValueTask DisposeAsync() => _listener.DisposeAsync();
}
