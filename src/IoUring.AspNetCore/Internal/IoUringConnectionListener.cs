using System.Net;
using System.Runtime.Versioning;
using IoUring.Net;
using Microsoft.AspNetCore.Connections;

namespace IoUring.AspNetCore.Internal;

// Connections stay open through Unbind and Dispose: Kestrel closes them between the two.
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

    public EndPoint EndPoint => _listener.LocalEndPoint;

    public async ValueTask<ConnectionContext?> AcceptAsync(CancellationToken cancellationToken = default)
    {
        IoUringConnection? connection = await _listener.AcceptAsync(cancellationToken).ConfigureAwait(false);
        return connection is null ? null : _transport.CreateContext(connection);
    }

    // Closes the socket: clients connecting during Kestrel's drain are refused at once, as on Sockets.
    public ValueTask UnbindAsync(CancellationToken cancellationToken = default) => _listener.DisposeAsync();

    public ValueTask DisposeAsync() => _listener.DisposeAsync();
}
