using System.Diagnostics.CodeAnalysis;
using System.Diagnostics.Metrics;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.Versioning;
using IoUring.Rings;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// A factory's hold on the <see cref="IoUringTransport"/> of its <see cref="IoUringTransportOptions"/>: the factories
/// made with the same options object (a service provider's <see cref="IoUringTransportFactory"/> and
/// <see cref="IoUringConnectionFactory"/>, which get the one <c>IOptions&lt;IoUringTransportOptions&gt;.Value</c>)
/// share one set of loops, so a proxy's inbound and outbound connections run on the same loops and one io_uring_enter
/// serves both. Factories given the same options object with other services (another host's logger, pool or meter
/// factory) get loops of their own. The loops start on first use (binding or connecting, not at construction, so a host
/// that never uses them starts none) and stop when the last factory holding them is disposed.
/// </summary>
internal sealed class LazyTransport
{
    private static readonly Lock s_tableLock = new();
    private static readonly ConditionalWeakTable<IoUringTransportOptions, SharedTransport> s_byOptions = new();

    private readonly object _owner;
    private readonly SharedTransport _shared;
    private readonly Lock _lock = new();
    private bool _toldUnavailable;
    private bool _disposed;

    public LazyTransport(object owner, IoUringTransportOptions options, ILoggerFactory loggerFactory,
        IMemoryPoolFactory<byte>? memoryPoolFactory, IMeterFactory? meterFactory)
    {
        _owner = owner;
        lock (s_tableLock)
        {
            s_byOptions.TryGetValue(options, out SharedTransport? found);
            // The same options object given to factories of another host (other services) gets loops of its own.
            bool otherHost = found is not null && !found.ServesFor(loggerFactory, memoryPoolFactory, meterFactory);
            if (found is not null && !otherHost && found.TryHold())
            {
                _shared = found;
                return;
            }
            // None yet, one that stopped (its holders all disposed, it cannot start again), or another host's.
            _shared = new SharedTransport(options, loggerFactory, memoryPoolFactory, meterFactory);
            _shared.TryHold();
            if (!otherHost)
            {
                s_byOptions.AddOrUpdate(options, _shared);
            }
        }
    }

    /// <summary>The transport if it has started.</summary>
    [SupportedOSPlatform("linux")]
    public IoUringTransport? Current => _shared.Current;

    /// <summary>
    /// The transport, started now if it has not been. If io_uring cannot be set up and <paramref name="onUnavailable"/>
    /// is given, it is called the first time this holder finds that out and false is returned from then on; without it
    /// the error is thrown. True only on Linux (a transport starts nowhere else), which CA1416 takes as Linux's guard.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The factory (<c>owner</c>) was disposed.</exception>
    [SupportedOSPlatformGuard("linux")]
    public bool TryGetOrStart(Action<IoUringException>? onUnavailable,
        [NotNullWhen(true)] out IoUringTransport? transport)
    {
        lock (_lock)
        {
            ObjectDisposedException.ThrowIf(_disposed, _owner); // named after the factory
            transport = _shared.GetOrStart(out IoUringException? unavailable);
            if (transport is not null)
            {
                return true;
            }
            if (onUnavailable is null)
            {
                ExceptionDispatchInfo.Throw(unavailable!); // one exception for every holder: keep its setup stack trace
            }
            if (!_toldUnavailable)
            {
                _toldUnavailable = true;
                onUnavailable(unavailable!);
            }
            return false;
        }
    }

    /// <summary>Lets go of the loops; the last holder stops them (every connection still open is aborted).</summary>
    public ValueTask DisposeAsync()
    {
        lock (_lock)
        {
            if (_disposed)
            {
                return ValueTask.CompletedTask;
            }
            _disposed = true;
        }
        return _shared.ReleaseAsync();
    }

    /// <summary>The transport of one options object and how many factories hold it.</summary>
    private sealed class SharedTransport(IoUringTransportOptions options, ILoggerFactory loggerFactory,
        IMemoryPoolFactory<byte>? memoryPoolFactory, IMeterFactory? meterFactory)
    {
        private readonly Lock _lock = new();
        private IoUringTransport? _transport;
        private IoUringException? _unavailable; // set up once and failed: not tried again
        private int _holders;
        private bool _stopped;

        [SupportedOSPlatform("linux")]
        public IoUringTransport? Current => Volatile.Read(ref _transport);

        /// <summary>Made with these services (a service provider's factories get the same ones).</summary>
        public bool ServesFor(ILoggerFactory loggers, IMemoryPoolFactory<byte>? pools, IMeterFactory? meters)
            => loggers == loggerFactory && pools == memoryPoolFactory && meters == meterFactory;

        public bool TryHold()
        {
            lock (_lock)
            {
                if (_stopped)
                {
                    return false;
                }
                _holders++;
                return true;
            }
        }

        public IoUringTransport? GetOrStart(out IoUringException? unavailable)
        {
            lock (_lock)
            {
                if (_transport is null && _unavailable is null)
                {
                    IoUringCapabilities capabilities =
                        IoUringCapabilities.For(options.ToNetworkOptions().Loop.Hooks);
                    try
                    {
                        // Unsupported (off Linux, among other causes): throws naming the cause, as the loops' setup
                        // still may.
                        if (!capabilities.IsSupported)
                        {
                            capabilities.EnsureSupported();
                        }
                        else
                        {
                            Volatile.Write(ref _transport,
                                IoUringTransport.Create(options, loggerFactory, memoryPoolFactory, meterFactory));
                        }
                    }
                    catch (IoUringException ex)
                    {
                        _unavailable = ex;
                    }
                }
                unavailable = _unavailable;
                return _transport;
            }
        }

        public async ValueTask ReleaseAsync()
        {
            IoUringTransport? transport;
            lock (_lock)
            {
                if (--_holders > 0)
                {
                    return;
                }
                _stopped = true;
                transport = _transport;
            }
            // A transport starts only on Linux: the check is for CA1416 (the JIT folds it away).
            if (transport is not null && OperatingSystem.IsLinux())
            {
                await transport.DisposeAsync().ConfigureAwait(false);
            }
        }
    }
}
