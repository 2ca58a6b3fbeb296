using System.Buffers;
using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Diagnostics;
using IoUring.Net;
using IoUring.Rings;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// One <see cref="IoUringNetwork"/> as Kestrel uses it: Kestrel's memory pool and exception types, loop errors
/// logged, the host's meter.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class IoUringTransport : IAsyncDisposable
{
    private readonly IoUringNetwork _network;
    private readonly MemoryPool<byte>? _ownedPool;

    private IoUringTransport(IoUringNetwork network, MemoryPool<byte>? ownedPool, ILogger logger,
        IoUringMetrics metrics, IoUringTransportOptions options)
    {
        Debug.Assert(network.Loops.Count > 0, "a network has at least one loop");
        _network = network;
        _ownedPool = ownedPool;
        Logger = logger;
        Metrics = metrics;
        IoUringTransportLog.TransportStarted(logger, DescribeFeatures(network, options, ownedPool is not null));
        if (ThreadPoolSpinning.CostsHere())
        {
            IoUringTransportLog.ThreadPoolSpinsOnOneCpu(logger);
        }
        if (network.Loops[0].BatchSchedulingError != 0)
        {
            IoUringTransportLog.BatchSchedulingRefused(logger, network.Loops[0].BatchSchedulingError);
        }
    }

    public ILogger Logger { get; }

    public IoUringMetrics Metrics { get; }

    public IoUringNetwork Network => _network;

    /// <exception cref="ArgumentException">An option is invalid.</exception>
    /// <exception cref="IoUringUnavailableException">io_uring cannot be used here.</exception>
    public static IoUringTransport Create(IoUringTransportOptions options, ILoggerFactory loggerFactory,
        IMemoryPoolFactory<byte>? memoryPoolFactory, IMeterFactory? meterFactory)
    {
        ILogger logger = loggerFactory.CreateLogger(IoUringTransportLog.Category);
        IoUringNetworkOptions networkOptions =
            options.ToNetworkOptions(ex => IoUringTransportLog.LoopHandlerException(logger, ex));
        // The loops' registered pools where zero-copy sends can use them; Kestrel's otherwise.
        bool loopPools = options.UseLoopMemoryPools && networkOptions.ZeroCopySendThreshold is not null
            && IoUringCapabilities.For(networkOptions.Loop.Hooks).HasZeroCopySend;
        MemoryPool<byte>? pool = loopPools
            ? null
            : memoryPoolFactory?.Create(new MemoryPoolOptions { Owner = "iouring" });
        try
        {
            networkOptions.MemoryPool = pool;
            networkOptions.MeterFactory = meterFactory;
            UseKestrelExceptions(networkOptions);
            return new IoUringTransport(new IoUringNetwork(networkOptions), pool, logger,
                IoUringMetrics.For(meterFactory), options);
        }
        catch
        {
            pool?.Dispose();
            throw;
        }
    }

    // The network's features, with this layer's reasons for the memory pool and its file reads.
    internal static string DescribeFeatures(IoUringNetwork network, IoUringTransportOptions options, bool kestrelPool)
    {
        FeatureSummary features = FeatureSummary.For(network);
        if (kestrelPool && !options.UseLoopMemoryPools)
        {
            features.Off("registered send buffers", "option UseLoopMemoryPools");
            if (options.ZeroCopySendThreshold is not null && network.Settings.Capabilities.HasZeroCopySend)
            {
                features.Off("zero-copy sends", "option UseLoopMemoryPools");
            }
        }
        else if (kestrelPool)
        {
            features.Off("registered send buffers", "Kestrel's pool, since zero-copy sends are off");
        }
        if (options.ReadFilesOnLoops)
        {
            features.On("file reads on loops");
        }
        else
        {
            features.Off("file reads on loops", "option ReadFilesOnLoops");
        }
        return features.ToString();
    }

    internal static void UseKestrelExceptions(IoUringNetworkOptions options)
    {
        options.CreateResetException = static message =>
            new ConnectionResetException(message, new SocketException((int)SocketError.ConnectionReset));
        options.CreateAbortedException = static message => new ConnectionAbortedException(message);
    }

    /// <exception cref="AddressInUseException">The address is taken.</exception>
    public IoUringConnectionListener Bind(EndPoint endPoint, int backlog)
    {
        IoUringListener listener;
        try
        {
            listener = endPoint is FileHandleEndPoint fileHandle
                ? ListenOnInherited(fileHandle, backlog)
                : _network.Listen(endPoint);
        }
        catch (SocketException e) when (e.SocketErrorCode == SocketError.AddressAlreadyInUse)
        {
            throw new AddressInUseException(e.Message, e);
        }
        IoUringTransportLog.ListenerBound(Logger, listener.LocalEndPoint.ToString() ?? "");
        return new IoUringConnectionListener(listener, this);
    }

    private IoUringListener ListenOnInherited(FileHandleEndPoint endPoint, int backlog)
    {
        // Not owned, as on Sockets: the handle belongs to whoever passed it (systemd, a parent process).
        var socket = new Socket(new SafeSocketHandle((IntPtr)endPoint.FileHandle, ownsHandle: false));
        try
        {
            if (socket.SocketType != SocketType.Stream)
            {
                throw new NotSupportedException(
                    $"File handle {endPoint.FileHandle} is a {socket.SocketType} socket; only stream sockets can be " +
                    "served.");
            }
            // Sets the backlog of a listening socket; starts one only bound.
            socket.Listen(backlog);
            return _network.Listen(socket, backlog);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    public IoUringConnectionContext CreateContext(IoUringConnection connection) => new(connection, this);

    public async ValueTask DisposeAsync()
    {
        await _network.DisposeAsync().ConfigureAwait(false);
        _ownedPool?.Dispose();
    }
}
