using System.Diagnostics.Metrics;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>Settings of an <see cref="IoUringNetwork"/>: its loops and the connections it makes.</summary>
public sealed class IoUringNetworkOptions
{
    /// <summary>Number of event loops, one thread and ring each.</summary>
    /// <remarks>Defaults to the number of CPUs the process may use.</remarks>
    public int LoopCount { get; set; } = Environment.ProcessorCount;

    /// <summary>Settings of each loop; its thread name gets the loop's index appended.</summary>
    public EventLoopOptions Loop { get; set; } = new();

    /// <summary>The listen backlog; when about this many accepted connections wait for
    /// <see cref="IoUringListener.AcceptAsync"/>, the loops stop accepting until half are taken.</summary>
    /// <remarks>Defaults to 512.</remarks>
    public int Backlog { get; set; } = 512;

    /// <summary>Accept with one multishot ACCEPT per loop, or (false) a single-shot ACCEPT per connection.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool MultishotAccept { get; set; } = true;

    /// <summary>Set TCP_NODELAY on TCP connections.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool NoDelay { get; set; } = true;

    /// <summary>Unread received bytes at which the connection stops receiving, or null for no limit.</summary>
    /// <remarks>Defaults to 1 MiB. Null lets a fast sender grow memory without bound: a security risk.</remarks>
    public long? MaxReadBufferSize { get; set; } = 1024 * 1024;

    /// <summary>Unsent written bytes at which FlushAsync waits, or null for no limit.</summary>
    /// <remarks>Defaults to 64 KiB.</remarks>
    public long? MaxWriteBufferSize { get; set; } = 64 * 1024;

    /// <summary>Run read continuations on the loop thread instead of the thread pool: faster, but application code
    /// then blocks every connection of the loop.</summary>
    /// <remarks>Defaults to false.</remarks>
    public bool UnsafePreferInlineScheduling { get; set; }

    /// <summary>Abort sends RST (SO_LINGER 0) rather than FIN.</summary>
    /// <remarks>Defaults to true.</remarks>
    public bool AbortWithReset { get; set; } = true;

    /// <summary>Sends of at least this many bytes use zero-copy SEND_ZC, or null for never. A connection whose
    /// zero-copy send the kernel copied anyway goes back to plain sends.</summary>
    /// <remarks>Defaults to 16 KiB on Linux 6.10 and later (cheaper small zero-copy sends), else 64 KiB. Zero-copy
    /// bytes count against <see cref="MaxWriteBufferSize"/> until the peer acknowledged them.</remarks>
    public long? ZeroCopySendThreshold { get; set; } = DefaultZeroCopySendThreshold;

    internal static long DefaultZeroCopySendThreshold { get; } =
        Environment.OSVersion.Version >= new Version(6, 10) ? 16 * 1024 : 64 * 1024;

    /// <summary>The pool of every connection's pipes, or null for each loop's own.</summary>
    /// <remarks>Defaults to null: the loop's <see cref="Loops.EventLoop.MemoryPool"/>, which zero-copy sends need. The
    /// network does not dispose a pool given here.</remarks>
    public System.Buffers.MemoryPool<byte>? MemoryPool { get; set; }

    /// <summary>Makes the exception <see cref="IoUringConnection.Input"/>'s reads fail with when the peer
    /// resets.</summary>
    /// <remarks>Defaults to null: an <see cref="IOException"/> wrapping a ConnectionReset
    /// <see cref="System.Net.Sockets.SocketException"/>.</remarks>
    public Func<string, Exception>? CreateResetException { get; set; }

    /// <summary>Makes the exception <see cref="IoUringConnection.Input"/>'s reads fail with after
    /// <see cref="IoUringConnection.Abort()"/> without a reason.</summary>
    /// <remarks>Defaults to null: an <see cref="IOException"/> wrapping an OperationAborted
    /// <see cref="System.Net.Sockets.SocketException"/>.</remarks>
    public Func<string, Exception>? CreateAbortedException { get; set; }

    /// <summary>Makes the "IoUring" meter the loops publish to (docs/metrics.md), or null for the process-wide
    /// one.</summary>
    /// <remarks>Defaults to null. In a host, pass its <see cref="IMeterFactory"/>. Networks of one factory share one
    /// meter; a disposed network's counts stay in it.</remarks>
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
