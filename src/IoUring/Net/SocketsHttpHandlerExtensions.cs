using System.Runtime.Versioning;

namespace IoUring.Net;

/// <summary>Runs <see cref="HttpClient"/>'s connections on io_uring.</summary>
[SupportedOSPlatform("linux")]
public static class SocketsHttpHandlerExtensions
{
    /// <summary>
    /// Sets the handler's <see cref="SocketsHttpHandler.ConnectCallback"/> so its connections run on
    /// <paramref name="network"/>'s loops, closed as <see cref="IoUringConnection.AsStream(bool)"/> says when the
    /// handler disposes them. Call it before the first request; the network must outlive the handler.
    /// </summary>
    /// <returns>The handler.</returns>
    /// <example>
    /// <code>
    /// await using var network = new IoUringNetwork();
    /// using var client = new HttpClient(new SocketsHttpHandler().UseIoUring(network));
    /// </code>
    /// </example>
    public static SocketsHttpHandler UseIoUring(this SocketsHttpHandler handler, IoUringNetwork network)
    {
        ArgumentNullException.ThrowIfNull(handler);
        ArgumentNullException.ThrowIfNull(network);
        handler.ConnectCallback = async (context, cancellationToken) =>
        {
            IoUringConnection connection =
                await network.ConnectAsync(context.DnsEndPoint, cancellationToken).ConfigureAwait(false);
            return connection.AsStream(ownsConnection: true);
        };
        return handler;
    }
}
