using System.Diagnostics.Metrics;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>Settings of an <see cref="IoUringNetwork"/>: its loops and the connections it makes.</summary>
public sealed class IoUringNetworkOptions
{
    /// <summary>Number of event loops (threads, each with its own ring).</summary>
    /// <remarks>Defaults to the number of CPUs the process may use.</remarks>
    public int LoopCount { get; set; } = Environment.ProcessorCount;

    /// <summary>Settings of each loop's ring and buffer ring.</summary>
    /// <remarks>Defaults to <see cref="EventLoopOptions"/>' defaults. The thread name gets the loop's index
    /// appended.</remarks>
    public EventLoopOptions Loop { get; set; } = new();

    /// <summary>The listen backlog.</summary>
    /// <remarks>Defaults to 512.</remarks>
    public int Backlog { get; set; } = 512;

    /// <summary>
    /// Accept with one multishot ACCEPT per loop (true), or with a single-shot ACCEPT re-armed after each connection
    /// (false), as servers did before Linux 5.19.
    /// </summary>
    /// <remarks>Defaults to true. Single-shot costs one more request per connection.</remarks>
    public bool MultishotAccept { get; set; } = true;

    /// <summary>Set TCP_NODELAY on TCP connections.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool NoDelay { get; set; } = true;

    /// <summary>
    /// Bytes received but not yet read by the application at which the connection stops receiving (backpressure),
    /// or null for no limit.
    /// </summary>
    /// <remarks>Defaults to 1 MiB. Null lets a fast sender grow memory without bound: a security risk.</remarks>
    public long? MaxReadBufferSize { get; set; } = 1024 * 1024;

    /// <summary>Bytes written but not yet sent at which the application's FlushAsync waits, or null for no
    /// limit.</summary>
    /// <remarks>Defaults to 64 KiB.</remarks>
    public long? MaxWriteBufferSize { get; set; } = 64 * 1024;

    /// <summary>
    /// Run the application's read continuations inline on the loop thread instead of the thread pool. Faster, but
    /// application code then blocks the loop and every connection on it.
    /// </summary>
    /// <remarks>Defaults to false.</remarks>
    public bool UnsafePreferInlineScheduling { get; set; }

    /// <summary>Abort sends RST (SO_LINGER 0) rather than FIN, as Kestrel's Sockets transport does.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool AbortWithReset { get; set; } = true;

    /// <summary>
    /// Sends of at least this many bytes use zero-copy SEND_ZC, or null to never use it. A connection whose zero-copy
    /// send the kernel reports as copied anyway (always so on loopback) goes back to plain sends.
    /// </summary>
    /// <remarks>
    /// Defaults to 16 KiB on Linux 6.10 and later (which made small zero-copy sends cheaper), 64 KiB before; see
    /// docs/benchmarks.md, "Zero-copy send". Bytes sent zero-copy count against <see cref="MaxWriteBufferSize"/> until
    /// their notification (the peer acknowledged them), so a peer that stops reading holds no more than on copying
    /// sends.
    /// </remarks>
    public long? ZeroCopySendThreshold { get; set; } = DefaultZeroCopySendThreshold;

    internal static long DefaultZeroCopySendThreshold { get; } =
        Environment.OSVersion.Version >= new Version(6, 10) ? 16 * 1024 : 64 * 1024;

    /// <summary>The memory pool of every connection's pipes, or null for each loop's own pool.</summary>
    /// <remarks>
    /// Defaults to null: each connection uses its loop's <see cref="Loops.EventLoop.MemoryPool"/> (pinned blocks of
    /// <see cref="Loops.EventLoopOptions.MemoryBlockSize"/> registered with the loop's ring), which lives as long as
    /// the loop. Zero-copy sends need such a pool; with any other every send copies. A pool given here is not disposed
    /// by the network.
    /// </remarks>
    public System.Buffers.MemoryPool<byte>? MemoryPool { get; set; }

    /// <summary>Makes the exception <see cref="IoUringConnection.Input"/>'s reads fail with when the peer resets the
    /// connection.</summary>
    /// <remarks>
    /// Defaults to null: an <see cref="IOException"/> whose inner exception is a
    /// <see cref="System.Net.Sockets.SocketException"/> with
    /// <see cref="System.Net.Sockets.SocketError.ConnectionReset"/>. Kestrel's transport makes it a
    /// ConnectionResetException.
    /// </remarks>
    public Func<string, Exception>? CreateResetException { get; set; }

    /// <summary>Makes the exception <see cref="IoUringConnection.Input"/>'s reads fail with after
    /// <see cref="IoUringConnection.Abort()"/> without a reason.</summary>
    /// <remarks>
    /// Defaults to null: an <see cref="IOException"/> whose inner exception is a
    /// <see cref="System.Net.Sockets.SocketException"/> with
    /// <see cref="System.Net.Sockets.SocketError.OperationAborted"/>. Kestrel's transport makes it a
    /// ConnectionAbortedException.
    /// </remarks>
    public Func<string, Exception>? CreateAbortedException { get; set; }

    /// <summary>Makes the "IoUring" meter on which the network's loops publish what they do (docs/metrics.md), or null
    /// for the process-wide meter of that name.</summary>
    /// <remarks>
    /// Defaults to null. In a host, pass its <see cref="IMeterFactory"/> so the meter is the host's. Networks of one
    /// factory share one meter (loop i's series adds up their loops i); a disposed network's counts stay in it.
    /// </remarks>
    public IMeterFactory? MeterFactory { get; set; }

    /// <summary>Throws <see cref="ArgumentException"/> naming the first invalid setting.</summary>
    public void Validate()
    {
        if (LoopCount < 1 || LoopCount > 1024)
        {
            throw new ArgumentException($"{nameof(LoopCount)} must be between 1 and 1024 (was {LoopCount}).",
                nameof(LoopCount));
        }
        if (Backlog < 1)
        {
            throw new ArgumentException($"{nameof(Backlog)} must be positive (was {Backlog}).", nameof(Backlog));
        }
        if (MaxReadBufferSize is < 1)
        {
            throw new ArgumentException(
                $"{nameof(MaxReadBufferSize)} must be positive or null (was {MaxReadBufferSize}).",
                nameof(MaxReadBufferSize));
        }
        if (MaxWriteBufferSize is < 1)
        {
            throw new ArgumentException(
                $"{nameof(MaxWriteBufferSize)} must be positive or null (was {MaxWriteBufferSize}).",
                nameof(MaxWriteBufferSize));
        }
        if (ZeroCopySendThreshold is < 1)
        {
            throw new ArgumentException(
                $"{nameof(ZeroCopySendThreshold)} must be positive or null (was {ZeroCopySendThreshold}).",
                nameof(ZeroCopySendThreshold));
        }
        ArgumentNullException.ThrowIfNull(Loop, nameof(Loop));
        Loop.Validate();
    }
}
