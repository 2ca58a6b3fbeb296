using System.Buffers;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Rings;
using IoUring.Testing;

namespace IoUring.Net;

/// <summary>What every connection of one network shares: options, memory pool, error types, the live set. A record, so
/// a layer above overrides with <c>with</c>.</summary>
[SupportedOSPlatform("linux")]
internal sealed record ConnectionSettings
{
    /// <summary>The pipes' pool, or null: each loop's own (<see cref="Loops.EventLoop.MemoryPool"/>, registered with
    /// its ring).</summary>
    public required MemoryPool<byte>? MemoryPool { get; init; }
    public long? MaxReadBufferSize { get; init; }
    public long? MaxWriteBufferSize { get; init; }
    public bool NoDelay { get; init; }
    public bool MultishotAccept { get; init; } = true;
    public bool UnsafePreferInlineScheduling { get; init; }
    public bool AbortWithReset { get; init; }
    public long ZeroCopySendThreshold { get; init; } = long.MaxValue;
    /// <summary>Test seam (<see cref="TestHooks.IgnoreZeroCopyCopied"/>).</summary>
    public bool IgnoreZeroCopyCopied { get; init; }
    /// <summary>Caller sends (<see cref="ConnectionOutput"/>); off by <see cref="TestHooks.NoCallerSends"/>.</summary>
    public bool CallerSends { get; init; } = true;
    public ConnectionRegistry? Registry { get; init; }

    /// <summary>Segment objects shared by the connections' outputs.</summary>
    public OutputSegmentPool OutputSegments { get; init; } = new();

    /// <summary>Test seam (<see cref="TestHooks.BeforeAcceptorCreated"/>).</summary>
    public Action<int>? BeforeAcceptorCreated { get; init; }

    /// <summary>What the kernel offers (tests replace it to act as an older kernel).</summary>
    public required IoUringCapabilities Capabilities { get; init; }

    /// <summary>A peer reset surfaces as it (Kestrel: ConnectionResetException).</summary>
    public Func<string, Exception> CreateResetException { get; init; } =
        static message => new IOException(message, new SocketException((int)SocketError.ConnectionReset));

    /// <summary>Reads fail with it after an abort (Kestrel: ConnectionAbortedException).</summary>
    public Func<string, Exception> CreateAbortedException { get; init; } =
        static message => new IOException(message, new SocketException((int)SocketError.OperationAborted));

    public Exception CreateSendException(int errno) => errno is Errno.EPIPE or Errno.ECONNRESET
        ? CreateResetException("Connection reset by peer.")
        : new IOException($"Send failed: {IoUringException.ErrnoName(errno)}.", SocketErrors.FromErrno(errno));

    public static ConnectionSettings From(IoUringNetworkOptions options, MemoryPool<byte>? pool,
        ConnectionRegistry registry, IoUringCapabilities capabilities)
    {
        var settings = new ConnectionSettings
        {
            MemoryPool = pool,
            Capabilities = capabilities,
            MaxReadBufferSize = options.MaxReadBufferSize,
            MaxWriteBufferSize = options.MaxWriteBufferSize,
            NoDelay = options.NoDelay,
            MultishotAccept = options.MultishotAccept,
            UnsafePreferInlineScheduling = options.UnsafePreferInlineScheduling,
            AbortWithReset = options.AbortWithReset,
            ZeroCopySendThreshold = options.ZeroCopySendThreshold ?? long.MaxValue,
            IgnoreZeroCopyCopied = options.Loop.Hooks?.IgnoreZeroCopyCopied ?? false,
            CallerSends = options.Loop.Hooks?.NoCallerSends != true,
            BeforeAcceptorCreated = options.Loop.Hooks?.BeforeAcceptorCreated,
            Registry = registry,
        };
        return settings with
        {
            CreateResetException = options.CreateResetException ?? settings.CreateResetException,
            CreateAbortedException = options.CreateAbortedException ?? settings.CreateAbortedException,
        };
    }
}
