using IoUring.AspNetCore;
using IoUring.AspNetCore.Internal.Files;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.DependencyInjection.Extensions;

namespace Microsoft.AspNetCore.Hosting;

/// <summary>Selects io_uring as Kestrel's transport.</summary>
public static class WebHostBuilderIoUringExtensions
{
    /// <summary>
    /// Makes Kestrel serve through io_uring. Where io_uring is unavailable it serves through the Sockets transport
    /// and logs a warning, unless <see cref="IoUringTransportOptions.ThrowIfUnavailable"/> is set.
    /// </summary>
    /// <param name="hostBuilder">The web host builder to configure.</param>
    /// <returns>The web host builder.</returns>
    /// <example>
    /// <code>
    /// var builder = WebApplication.CreateSlimBuilder(args);
    /// builder.WebHost.UseIoUring();
    /// </code>
    /// </example>
    public static IWebHostBuilder UseIoUring(this IWebHostBuilder hostBuilder)
    {
        ArgumentNullException.ThrowIfNull(hostBuilder);
        return hostBuilder.ConfigureServices(services =>
        {
            services.AddSingleton<IConnectionListenerFactory, IoUringTransportFactory>();
            // ReadFilesOnLoops' middleware, once however often this runs.
            services.TryAddEnumerable(ServiceDescriptor.Singleton<IStartupFilter, LoopFilesStartupFilter>());
        });
    }

    /// <summary>Makes Kestrel serve through io_uring with the given options.</summary>
    /// <param name="hostBuilder">The web host builder to configure.</param>
    /// <param name="configureOptions">Sets the transport's options.</param>
    /// <returns>The web host builder.</returns>
    /// <example>
    /// <code>
    /// builder.WebHost.UseIoUring(options => options.LoopCount = 2);
    /// </code>
    /// </example>
    public static IWebHostBuilder UseIoUring(this IWebHostBuilder hostBuilder,
        Action<IoUringTransportOptions> configureOptions)
    {
        ArgumentNullException.ThrowIfNull(configureOptions);
        return hostBuilder.UseIoUring().ConfigureServices(services => services.Configure(configureOptions));
    }
}
