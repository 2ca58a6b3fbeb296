using System.Diagnostics.Metrics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.AspNetCore.Internal;
using IoUring.Rings;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Server.Kestrel.Transport.Sockets;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore;

/// <summary>
/// Kestrel's transport on io_uring: binds IP endpoints, Unix domain sockets and inherited listening sockets
/// (<see cref="FileHandleEndPoint"/>).
/// </summary>
/// <remarks>
/// <para>Register it with <c>builder.WebHost.UseIoUring()</c>. The loops start at the first bind and are shared with
/// the <see cref="IoUringConnectionFactory"/> of the same service provider; the last of the two to be disposed stops
/// them.</para>
/// <para>Where io_uring cannot be set up, it binds through Kestrel's <see cref="SocketTransportFactory"/> and logs one
/// warning, unless <see cref="IoUringTransportOptions.ThrowIfUnavailable"/> is set.</para>
/// </remarks>
public sealed class IoUringTransportFactory
    : IConnectionListenerFactory, IConnectionListenerFactorySelector, IAsyncDisposable, IDisposable
{
    private readonly IoUringTransportOptions _options;
    private readonly ILoggerFactory _loggerFactory;
    private readonly IOptionsFactory<SocketTransportOptions>? _socketOptionsFactory;
    private readonly LazyTransport _transport;
    private SocketTransportFactory? _fallback;

    /// <summary>Creates the factory; dependency injection supplies the optional services.</summary>
    /// <param name="options">The transport options.</param>
    /// <param name="loggerFactory">The logger factory.</param>
    /// <param name="memoryPoolFactory">Kestrel's memory pool factory
    /// (see <see cref="IoUringTransportOptions.UseLoopMemoryPools"/>).</param>
    /// <param name="socketOptionsFactory">Makes the Sockets transport's options for the fallback.</param>
    /// <param name="meterFactory">Creates the "IoUring" meter.</param>
    /// <exception cref="ArgumentException">An option is out of range.</exception>
    public IoUringTransportFactory(
        IOptions<IoUringTransportOptions> options,
        ILoggerFactory loggerFactory,
        IMemoryPoolFactory<byte>? memoryPoolFactory = null,
        IOptionsFactory<SocketTransportOptions>? socketOptionsFactory = null,
        IMeterFactory? meterFactory = null)
    {
        ArgumentNullException.ThrowIfNull(options);
        ArgumentNullException.ThrowIfNull(loggerFactory);
        _options = options.Value;
        _options.Validate();
        _loggerFactory = loggerFactory;
        _socketOptionsFactory = socketOptionsFactory;
        _transport = new LazyTransport(this, _options, loggerFactory, memoryPoolFactory, meterFactory);
    }

    /// <summary>True once a bind found io_uring unavailable and went to the Sockets transport instead.</summary>
    public bool IsFallbackActive => Volatile.Read(ref _fallback) is not null;

    // Tests: the loops, once the first bind started them.
    [SupportedOSPlatform("linux")]
    internal IoUring.Net.IoUringNetwork? Network => _transport.Current?.Network;

    /// <inheritdoc />
    /// <exception cref="AddressInUseException">The address is taken.</exception>
    /// <exception cref="IoUringUnavailableException">io_uring is unavailable and
    /// <see cref="IoUringTransportOptions.ThrowIfUnavailable"/> is set.</exception>
    public ValueTask<IConnectionListener> BindAsync(EndPoint endpoint, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(endpoint);
        if (!CanBind(endpoint))
        {
            throw new NotSupportedException(
                $"{endpoint.GetType().Name} is not supported: use an IPEndPoint, a UnixDomainSocketEndPoint or a " +
                "FileHandleEndPoint.");
        }
        cancellationToken.ThrowIfCancellationRequested();
        if (!_transport.TryGetOrStart(_options.ThrowIfUnavailable ? null : UseSockets, out IoUringTransport? transport))
        {
            return _fallback!.BindAsync(endpoint, cancellationToken);
        }
        return new ValueTask<IConnectionListener>(transport.Bind(endpoint, _options.Backlog));
    }

    /// <inheritdoc />
    public bool CanBind(EndPoint endpoint) => endpoint is IPEndPoint or UnixDomainSocketEndPoint or FileHandleEndPoint;

    // Any setup failure, not only IoUringUnavailableException: Sockets serves better than nothing. Called once,
    // under the LazyTransport's lock.
    private void UseSockets(IoUringException ex)
    {
        IoUringTransportLog.IoUringUnavailable(_loggerFactory.CreateLogger(IoUringTransportLog.Category), ex.Message);
        SocketTransportOptions socketOptions =
            _socketOptionsFactory?.Create(Options.DefaultName) ?? new SocketTransportOptions();
        _options.CopyTo(socketOptions);
        Volatile.Write(ref _fallback, new SocketTransportFactory(Options.Create(socketOptions), _loggerFactory));
    }

    /// <summary>Lets go of the event loops; the last factory sharing them stops them, aborting every open
    /// connection.</summary>
    public ValueTask DisposeAsync() => _transport.DisposeAsync();

    /// <summary>Same as <see cref="DisposeAsync"/>, blocking.</summary>
    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();
}
