using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.AspNetCore.Internal;
using IoUring.Net;
using IoUring.Rings;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore;

/// <summary>
/// Outbound connections on io_uring (IORING_OP_CONNECT) as <see cref="ConnectionContext"/>s, with the same features
/// and lifetime as the connections <see cref="IoUringTransportFactory"/> accepts.
/// </summary>
/// <remarks>The loops start at the first connect and are shared with the <see cref="IoUringTransportFactory"/> of the
/// same service provider, so a proxy's inbound and outbound connections run on the same loops.</remarks>
public sealed class IoUringConnectionFactory : IConnectionFactory, IAsyncDisposable, IDisposable
{
    private readonly LazyTransport _transport;
    private readonly ILogger _logger;

    /// <summary>Creates the factory; dependency injection supplies the optional services.</summary>
    /// <param name="options">The transport options (the listen-only ones are ignored).</param>
    /// <param name="loggerFactory">The logger factory.</param>
    /// <param name="memoryPoolFactory">Kestrel's memory pool factory
    /// (see <see cref="IoUringTransportOptions.UseLoopMemoryPools"/>).</param>
    /// <param name="meterFactory">Creates the "IoUring" meter.</param>
    /// <exception cref="ArgumentException">An option is out of range.</exception>
    public IoUringConnectionFactory(
        IOptions<IoUringTransportOptions> options,
        ILoggerFactory loggerFactory,
        IMemoryPoolFactory<byte>? memoryPoolFactory = null,
        IMeterFactory? meterFactory = null)
    {
        ArgumentNullException.ThrowIfNull(options);
        ArgumentNullException.ThrowIfNull(loggerFactory);
        options.Value.Validate();
        _transport = new LazyTransport(this, options.Value, loggerFactory, memoryPoolFactory, meterFactory);
        _logger = loggerFactory.CreateLogger(IoUringTransportLog.Category);
    }

    /// <summary>Connects to <paramref name="endpoint"/>: an <see cref="IPEndPoint"/>, a
    /// <see cref="UnixDomainSocketEndPoint"/>, or a <see cref="DnsEndPoint"/> (each address in turn).</summary>
    /// <exception cref="SocketException">The connect failed.</exception>
    /// <exception cref="IoUringUnavailableException">io_uring cannot be used here.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    public async ValueTask<ConnectionContext> ConnectAsync(EndPoint endpoint,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(endpoint);
        if (!_transport.TryGetOrStart(onUnavailable: null, out IoUringTransport? transport))
        {
            throw new UnreachableException(); // without onUnavailable, a transport that cannot start throws
        }
        return transport.CreateContext(
            await transport.Network.ConnectAsync(endpoint, cancellationToken).ConfigureAwait(false));
    }

    /// <summary>
    /// Makes <paramref name="handler"/> connect on this factory's loops, starting them if needed; for code that builds
    /// its own handlers (YARP's <c>ForwarderHttpClientFactory</c>, say). Where io_uring is unavailable the handler
    /// keeps its sockets and the first such call logs a warning.
    /// </summary>
    /// <param name="handler">The handler to configure, before its first request.</param>
    /// <returns>True if the handler connects through io_uring, false if through sockets.</returns>
    /// <exception cref="ObjectDisposedException">The factory was disposed.</exception>
    public bool ConfigureHttpHandler(SocketsHttpHandler handler)
    {
        ArgumentNullException.ThrowIfNull(handler);
        if (!_transport.TryGetOrStart(LogUnavailable, out IoUringTransport? transport))
        {
            return false;
        }
        handler.UseIoUring(transport.Network);
        return true;
    }

    /// <summary>Null (after one warning) without io_uring.</summary>
    [SupportedOSPlatform("linux")]
    internal IoUringNetwork? NetworkOrNull()
        => _transport.TryGetOrStart(LogUnavailable, out IoUringTransport? transport) ? transport.Network : null;

    private void LogUnavailable(IoUringException ex)
        => IoUringTransportLog.IoUringUnavailableForHttpClient(_logger, ex.Message);

    /// <summary>Lets go of the event loops; the last factory sharing them stops them, aborting every open
    /// connection.</summary>
    public ValueTask DisposeAsync() => _transport.DisposeAsync();

    /// <summary>Same as <see cref="DisposeAsync"/>, blocking.</summary>
    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();
}
