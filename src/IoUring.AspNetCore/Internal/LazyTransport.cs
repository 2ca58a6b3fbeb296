using IoUring.Rings;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Internal;

/// <summary>
/// The <see cref="IoUringTransport"/> of one factory, started on first use (binding or connecting, not at DI
/// construction, so a host that never uses it starts no loops) and stopped when the factory is disposed.
/// </summary>
internal sealed class LazyTransport(object owner, IoUringTransportOptions options, ILoggerFactory loggerFactory, IMemoryPoolFactory<byte>? memoryPoolFactory, IoUringMetrics metrics)
{
    private readonly Lock _lock = new();
    private IoUringTransport? _transport;
    private bool _unavailable;
    private bool _disposed;

    /// <summary>The transport if it has started.</summary>
    public IoUringTransport? Current => Volatile.Read(ref _transport);

    /// <summary>
    /// The transport, started now if it has not been. If io_uring cannot be set up and <paramref name="onUnavailable"/>
    /// is given, it is called once (under the lock) and null is returned from then on; without it the error is thrown.
    /// </summary>
    /// <exception cref="ObjectDisposedException">The factory (<c>owner</c>) was disposed.</exception>
    public IoUringTransport? GetOrStart(Action<IoUringException>? onUnavailable)
    {
        lock (_lock)
        {
            ObjectDisposedException.ThrowIf(_disposed, owner); // named after the factory
            if (_transport is not null || _unavailable)
            {
                return _transport;
            }
            try
            {
                Volatile.Write(ref _transport, IoUringTransport.Create(options, loggerFactory, memoryPoolFactory, metrics));
                return _transport;
            }
            catch (IoUringException ex) when (onUnavailable is not null)
            {
                _unavailable = true;
                onUnavailable(ex);
                return null;
            }
        }
    }

    public async ValueTask DisposeAsync()
    {
        IoUringTransport? transport;
        lock (_lock)
        {
            if (_disposed)
            {
                return;
            }
            _disposed = true;
            transport = _transport;
        }
        if (transport is not null)
        {
            await transport.DisposeAsync().ConfigureAwait(false);
        }
    }
}
