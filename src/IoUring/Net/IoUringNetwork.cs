using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Diagnostics;
using IoUring.Loops;
using IoUring.Rings;

namespace IoUring.Net;

/// <summary>
/// The entry point for plain .NET code: io_uring event loops, one thread and ring each, on which to listen and connect.
/// </summary>
/// <example>
/// <code>
/// await using var network = new IoUringNetwork();
/// await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 5000));
/// while (await listener.AcceptAsync() is { } connection)
/// {
///     _ = Task.Run(async () =>
///     {
///         await using var _ = connection;
///         await connection.Input.CopyToAsync(connection.Output); // echo until the peer's FIN
///     });
/// }
/// </code>
/// </example>
[SupportedOSPlatform("linux")]
public sealed class IoUringNetwork : IAsyncDisposable, IDisposable
{
    private readonly EventLoop[] _loops;
    private readonly IoUringNetworkOptions _options;
    private readonly ConnectionRegistry _registry = new();
    private readonly IoUringMetrics _metrics;
    private readonly System.Collections.Concurrent.ConcurrentDictionary<IoUringUdpSocket, byte> _udpSockets = new();
    private int _nextConnectLoop;
    private int _disposed;

    /// <summary>Starts <see cref="IoUringNetworkOptions.LoopCount"/> loops.</summary>
    /// <exception cref="ArgumentException">An option is invalid.</exception>
    /// <exception cref="IoUringUnavailableException">io_uring cannot be used here.</exception>
    public IoUringNetwork(IoUringNetworkOptions? options = null)
    {
        _options = options ?? new IoUringNetworkOptions();
        _options.Validate();
        IoUringCapabilities capabilities = IoUringCapabilities.For(_options.Loop.Hooks);
        capabilities.EnsureSupported();

        // no pool given: each loop uses its own
        Settings = ConnectionSettings.From(_options, _options.MemoryPool, _registry, capabilities);

        // before the loops: it may throw, and no loop may be left running
        _metrics = IoUringMetrics.For(_options.MeterFactory);
        _loops = new EventLoop[_options.LoopCount];
        try
        {
            for (int i = 0; i < _loops.Length; i++)
            {
                EventLoopOptions loopOptions = _options.Loop;
                string baseName = loopOptions.ThreadName;
                EventLoop loop = new(loopOptions.WithThreadName($"{baseName} {i}"));
                _loops[i] = loop;
                loop.Stopping += () => CloseConnectionsOf(loop);
                loop.Stopping += () => CloseUdpSocketsOf(loop);
            }
        }
        catch
        {
            foreach (EventLoop? loop in _loops)
            {
                loop?.Dispose();
            }
            throw;
        }
        _metrics.Register(this);
    }

    /// <summary>The loops, one per thread.</summary>
    public IReadOnlyList<EventLoop> Loops => _loops;

    /// <summary>Connections open right now.</summary>
    public int ConnectionCount => _registry.Count;

    internal ConnectionSettings Settings { get; }

    /// <summary>One line naming the kernel, the loop count and each io_uring feature, "on" or "off (reason)": for a
    /// start log or an issue.</summary>
    public string DescribeFeatures() => FeatureSummary.For(this).ToString();

    /// <summary>The connections' pool: <see cref="IoUringNetworkOptions.MemoryPool"/>, or else the first loop's (each
    /// connection uses its own loop's).</summary>
    public MemoryPool<byte> MemoryPool => Settings.MemoryPool ?? _loops[0].MemoryPool;

    /// <summary>Blocks out of the loops' own pools, zero-copy pins included; -1 with the user's pool.</summary>
    internal int RentedMemoryBlocks
        => Settings.MemoryPool is null ? _loops.Sum(l => l.MemoryPoolIfCreated?.RentedBlocks ?? 0) : -1;

    internal int RetainedMemoryBlocks => _loops.Sum(l => l.MemoryPoolIfCreated?.RetainedBlocks ?? 0);

    /// <summary>Binds and listens on <paramref name="endPoint"/> (an <see cref="IPEndPoint"/>, dual mode for
    /// <see cref="IPAddress.IPv6Any"/>, or a <see cref="UnixDomainSocketEndPoint"/>) and accepts on every
    /// loop.</summary>
    /// <exception cref="NotSupportedException">The endpoint type is not supported.</exception>
    /// <exception cref="SocketException">Binding failed (e.g.
    /// <see cref="SocketError.AddressAlreadyInUse"/>).</exception>
    public IoUringListener Listen(EndPoint endPoint)
    {
        ArgumentNullException.ThrowIfNull(endPoint);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        Socket socket = CreateListeningSocket(endPoint, _options.Backlog);
        return new IoUringListener(socket, _loops, Settings, _options.Backlog);
    }

    /// <summary>Accepts on every loop from <paramref name="listeningSocket"/>, already bound and listening (e.g.
    /// systemd's), holding up to <paramref name="backlog"/> connections for <see cref="IoUringListener.AcceptAsync"/>.
    /// The listener disposes the socket (over a <see cref="SafeSocketHandle"/> with <c>ownsHandle: false</c> the fd
    /// stays open).</summary>
    public IoUringListener Listen(Socket listeningSocket, int backlog)
    {
        ArgumentNullException.ThrowIfNull(listeningSocket);
        ArgumentOutOfRangeException.ThrowIfLessThan(backlog, 1);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        return new(listeningSocket, _loops, Settings, backlog);
    }

    internal static Socket CreateListeningSocket(EndPoint endPoint, int backlog)
    {
        ProtocolType protocol = endPoint switch
        {
            IPEndPoint => ProtocolType.Tcp,
            UnixDomainSocketEndPoint => ProtocolType.Unspecified,
            _ => throw new NotSupportedException(
                $"{endPoint.GetType().Name} is not supported: use an IPEndPoint or a UnixDomainSocketEndPoint."),
        };
        var socket = new Socket(endPoint.AddressFamily, SocketType.Stream, protocol);
        try
        {
            if (endPoint is IPEndPoint ip && ip.Address.Equals(IPAddress.IPv6Any))
            {
                socket.DualMode = true;
            }
            socket.Bind(endPoint);
            socket.Listen(backlog);
            return socket;
        }
        catch
        {
            socket.Dispose();
            throw;
        }
    }

    /// <summary>Connects to <paramref name="endPoint"/> on one of the loops, round robin: an <see cref="IPEndPoint"/>,
    /// a <see cref="UnixDomainSocketEndPoint"/>, or a <see cref="DnsEndPoint"/> (its addresses tried in
    /// turn).</summary>
    /// <exception cref="SocketException">The connect failed (e.g. <see cref="SocketError.ConnectionRefused"/>); for a
    /// <see cref="DnsEndPoint"/>, the last address's error, or <see cref="SocketError.HostNotFound"/>.</exception>
    /// <exception cref="OperationCanceledException"><paramref name="cancellationToken"/> was cancelled.</exception>
    /// <exception cref="ObjectDisposedException">The network or the connect's loop is stopping or stopped.</exception>
    public async ValueTask<IoUringConnection> ConnectAsync(EndPoint endPoint,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(endPoint);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        if (endPoint is DnsEndPoint dns)
        {
            return await ConnectToHostAsync(dns, cancellationToken).ConfigureAwait(false);
        }
        if (endPoint is not (IPEndPoint or UnixDomainSocketEndPoint))
        {
            throw new NotSupportedException(
                $"{endPoint.GetType().Name} is not supported: use an IPEndPoint, a UnixDomainSocketEndPoint or a " +
                "DnsEndPoint.");
        }
        cancellationToken.ThrowIfCancellationRequested();
        EventLoop loop = NextLoop();
        var operation = new ConnectOperation(loop, endPoint, Settings);
        loop.Post(static s => { var (op, token) = ((ConnectOperation, CancellationToken))s!; op.Start(token); },
            (operation, cancellationToken));
        return await operation.Task.ConfigureAwait(false);
    }

    private async ValueTask<IoUringConnection> ConnectToHostAsync(DnsEndPoint host, CancellationToken cancellationToken)
    {
        IPAddress[] addresses = IPAddress.TryParse(host.Host, out IPAddress? literal)
            ? [literal]
            : await Dns.GetHostAddressesAsync(host.Host, host.AddressFamily, cancellationToken).ConfigureAwait(false);
        SocketException? last = null;
        foreach (IPAddress address in addresses)
        {
            try
            {
                return await ConnectAsync(new IPEndPoint(address, host.Port), cancellationToken).ConfigureAwait(false);
            }
            catch (SocketException ex)
            {
                last = ex;
            }
        }
        throw last ?? new SocketException((int)SocketError.HostNotFound);
    }

    /// <summary>Binds a UDP socket to <paramref name="localEndPoint"/> (dual mode for
    /// <see cref="IPAddress.IPv6Any"/>) on one of the loops, round robin, and starts receiving.</summary>
    /// <exception cref="NotSupportedException">The endpoint is not an <see cref="IPEndPoint"/>.</exception>
    /// <exception cref="ArgumentException">An option is invalid.</exception>
    /// <exception cref="SocketException">Binding failed (e.g.
    /// <see cref="SocketError.AddressAlreadyInUse"/>).</exception>
    /// <exception cref="ObjectDisposedException">The network is disposed or being disposed.</exception>
    public IoUringUdpSocket BindUdp(EndPoint localEndPoint, IoUringUdpOptions? options = null)
    {
        ArgumentNullException.ThrowIfNull(localEndPoint);
        ObjectDisposedException.ThrowIf(_disposed != 0, this);
        if (localEndPoint is not IPEndPoint ip)
        {
            throw new NotSupportedException(
                $"{localEndPoint.GetType().Name} is not supported for UDP: use an IPEndPoint.");
        }
        options ??= new IoUringUdpOptions();
        options.Validate();
        var socket = new Socket(ip.AddressFamily, SocketType.Dgram, ProtocolType.Udp);
        try
        {
            if (ip.Address.Equals(IPAddress.IPv6Any))
            {
                socket.DualMode = true;
            }
            socket.Bind(ip);
        }
        catch
        {
            socket.Dispose();
            throw;
        }
        IoUringUdpSocket udp = new(NextLoop(), socket, options, s => _udpSockets.TryRemove(s, out _));
        // registered before it starts, so a racing dispose or loop stop finds and closes it
        _udpSockets.TryAdd(udp, 0);
        udp.Start(); // on failure it closed itself and left the set
        return udp;
    }

    private EventLoop NextLoop()
        => _loops[(int)((uint)Interlocked.Increment(ref _nextConnectLoop) % (uint)_loops.Length)];

    /// <summary>Aborts every connection, closes every UDP socket, then stops the loops.</summary>
    public async ValueTask DisposeAsync()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            return;
        }
        // Before the first await: a dispose from a connection's Closed continuation or ConnectionClosed callback must
        // not wait for that connection's own signal (LifetimeTests).
        IoUringConnection? signalling = ConnectionRegistry.SignallingOnThisThread;
        foreach (IoUringConnection connection in _registry.Snapshot())
        {
            connection.Abort();
        }
        // whatever throws, the loops stop and the meter lets the network go
        try
        {
            try
            {
                await Task.WhenAll(_udpSockets.Keys.Select(s => s.DisposeAsync().AsTask())).ConfigureAwait(false);
            }
            finally
            {
                await Task.WhenAll(_loops.Select(l => l.StopAsync())).ConfigureAwait(false);
                _options.Loop.Hooks?.AfterLoopsStopped?.Invoke();
            }
        }
        finally
        {
            try
            {
                foreach (EventLoop loop in _loops)
                {
                    loop.Dispose();
                }
            }
            finally
            {
                _metrics.Retire(this); // the loops' counts are final: they stay in the meter
            }
        }
        // return once each connection has told its application
        await _registry.WhenClosedSignalled(signalling).ConfigureAwait(false);
    }

    // A stopping loop closes its connections and sockets, so that no fd outlives it.
    private void CloseConnectionsOf(EventLoop loop)
    {
        loop.AssertOnLoopThread();
        foreach (IoUringConnection connection in _registry.Snapshot())
        {
            if (connection.Loop == loop)
            {
                try
                {
                    connection.Abort();
                }
                catch (Exception ex)
                {
                    loop.ReportUnhandled(ex); // the next connections are closed all the same
                }
            }
        }
    }

    private void CloseUdpSocketsOf(EventLoop loop)
    {
        loop.AssertOnLoopThread();
        foreach (IoUringUdpSocket socket in _udpSockets.Keys)
        {
            if (socket.Loop == loop)
            {
                try
                {
                    socket.BeginClose();
                }
                catch (Exception ex)
                {
                    loop.ReportUnhandled(ex); // the next sockets are closed all the same
                }
            }
        }
    }

    /// <summary>Same as <see cref="DisposeAsync"/>, blocking.</summary>
    public void Dispose() => DisposeAsync().AsTask().GetAwaiter().GetResult();
}
