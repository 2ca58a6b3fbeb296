using System.Diagnostics;
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
/// A factory's hold on the <see cref="SharedTransport"/> of its options object: a service provider's two factories get
/// the same options object, so they share loops; another host's factories get their own.
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
            bool otherHost = found is not null && !found.ServesFor(loggerFactory, memoryPoolFactory, meterFactory);
            if (found is not null && !otherHost && found.TryHold())
            {
                _shared = found;
                return;
            }
            // None yet, one that stopped (it cannot start again), or another host's.
            _shared = new SharedTransport(options, loggerFactory, memoryPoolFactory, meterFactory);
            _shared.TryHold();
            if (!otherHost)
            {
                s_byOptions.AddOrUpdate(options, _shared);
            }
        }
    }

    [SupportedOSPlatform("linux")]
    public IoUringTransport? Current => _shared.Current;

    /// <summary>Where io_uring cannot be set up, <paramref name="onUnavailable"/> is called once per holder and false
    /// returned; without it the error is thrown. True only on Linux (CA1416's guard).</summary>
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
            Debug.Assert(unavailable is not null, "a transport that did not start has its setup error");
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

    /// <summary>The last holder stops the loops, aborting open connections.</summary>
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
}
