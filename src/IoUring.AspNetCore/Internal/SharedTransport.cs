using System.Diagnostics;
using System.Diagnostics.Metrics;
using System.Runtime.Versioning;
using IoUring.Rings;
using Microsoft.AspNetCore.Connections;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Internal;

/// <summary>The transport of one options object, stopped when its last <see cref="LazyTransport"/> lets go.</summary>
internal sealed class SharedTransport(IoUringTransportOptions options, ILoggerFactory loggerFactory,
    IMemoryPoolFactory<byte>? memoryPoolFactory, IMeterFactory? meterFactory)
{
    private readonly Lock _lock = new();
    private IoUringTransport? _transport;
    private IoUringException? _unavailable; // set up once and failed: not tried again
    private int _holders;
    private bool _stopped; // the last holder let go: never starts again

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
            Debug.Assert(_holders > 0 && !_stopped, "only a holder starts the transport");
            if (_transport is null && _unavailable is null)
            {
                IoUringCapabilities capabilities =
                    IoUringCapabilities.For(options.ToNetworkOptions().Loop.Hooks);
                try
                {
                    // Throws naming the cause (off Linux too), as the loops' setup still may.
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
            Debug.Assert((_transport is null) != (_unavailable is null), "started or failed, never both");
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
            Debug.Assert(_holders == 0 && !_stopped, "each holder lets go once");
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
