using IoUring.AspNetCore;
using Microsoft.Extensions.DependencyInjection.Extensions;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Runs the connections of HttpClients made by IHttpClientFactory on io_uring.</summary>
public static class HttpClientBuilderIoUringExtensions
{
    /// <summary>
    /// The client's primary <see cref="SocketsHttpHandler"/> connects through io_uring: its connections run on the
    /// loops of the container's <see cref="IoUringConnectionFactory"/> (registered here if it is not; its options are
    /// <see cref="IoUringTransportOptions"/>, the loops start when the first handler is built). Everything else about
    /// the handler (pooling, HTTP/2, TLS, proxies' own settings) stays as configured. Where io_uring is unavailable the
    /// handler connects through sockets as it would without this call, and one warning names the cause
    /// (<see cref="IoUringTransportOptions.ThrowIfUnavailable"/> is Kestrel's: it does not apply here). In a host that
    /// also serves with <c>UseIoUring()</c>, the clients' connections share the server's loops.
    /// <para>Call it after a <c>ConfigurePrimaryHttpMessageHandler</c> that replaces the primary handler: replacing it
    /// afterwards drops the configurations made before, this one included.</para>
    /// </summary>
    /// <param name="builder">The client's builder from <c>AddHttpClient</c>.</param>
    /// <returns>The builder.</returns>
    /// <exception cref="InvalidOperationException">When a handler is built: the primary handler was replaced by one
    /// that is not a <see cref="SocketsHttpHandler"/> (only that handler takes a connect callback).</exception>
    /// <example>
    /// <code>
    /// builder.Services.AddHttpClient("backend").UseIoUring();
    /// </code>
    /// </example>
    public static IHttpClientBuilder UseIoUring(this IHttpClientBuilder builder)
    {
        ArgumentNullException.ThrowIfNull(builder);
        builder.Services.TryAddSingleton<IoUringConnectionFactory>();
        return builder.ConfigurePrimaryHttpMessageHandler((handler, services) =>
        {
            if (handler is not SocketsHttpHandler sockets)
            {
                throw new InvalidOperationException(
                    $"UseIoUring() needs a SocketsHttpHandler as the primary handler of HttpClient '{builder.Name}', " +
                    $"not a {handler.GetType().Name}.");
            }
            services.GetRequiredService<IoUringConnectionFactory>().ConfigureHttpHandler(sockets);
        });
    }
}
