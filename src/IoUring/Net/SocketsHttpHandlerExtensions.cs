using System.Runtime.Versioning;

namespace IoUring.Net;

/// <summary>Runs <see cref="HttpClient"/>'s connections on io_uring.</summary>
[SupportedOSPlatform("linux")]
public static class SocketsHttpHandlerExtensions
{
    /// <summary>
    /// Sets the handler's <see cref="SocketsHttpHandler.ConnectCallback"/> so that every connection it opens is an
    /// io_uring connection on <paramref name="network"/>'s loops: host names are resolved and their addresses tried in
    /// turn, TLS (SslStream) and HTTP/1.1, HTTP/2 run on top as on a socket, and a connection the handler disposes is
    /// closed gracefully (aborted if the peer has not taken the rest of the output within 5 seconds; see
    /// <see cref="IoUringConnection.AsStream(bool)"/>). The network must outlive the handler.
    /// </summary>
    /// <param name="handler">The handler to configure (before its first request).</param>
    /// <param name="network">The loops the connections run on.</param>
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
