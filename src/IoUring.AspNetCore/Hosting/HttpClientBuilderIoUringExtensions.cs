using IoUring.AspNetCore;
using Microsoft.Extensions.DependencyInjection.Extensions;

namespace Microsoft.Extensions.DependencyInjection;

/// <summary>Runs the connections of HttpClients made by IHttpClientFactory on io_uring.</summary>
public static class HttpClientBuilderIoUringExtensions
{
    /// <summary>
    /// The client's primary <see cref="SocketsHttpHandler"/> connects on the loops of the container's
    /// <see cref="IoUringConnectionFactory"/> (registered if missing), shared with a server's <c>UseIoUring()</c>.
    /// Without io_uring it connects through sockets and logs one warning, whatever
    /// <see cref="IoUringTransportOptions.ThrowIfUnavailable"/> says.
    /// </summary>
    /// <remarks>Call it after any <c>ConfigurePrimaryHttpMessageHandler</c> that replaces the primary
    /// handler.</remarks>
    /// <param name="builder">The client's builder from <c>AddHttpClient</c>.</param>
    /// <returns>The builder.</returns>
    /// <exception cref="InvalidOperationException">The primary handler is not a <see cref="SocketsHttpHandler"/>
    /// (thrown when a handler is built).</exception>
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
