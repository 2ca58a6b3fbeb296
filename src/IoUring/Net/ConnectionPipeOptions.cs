using System.Buffers;
using System.IO.Pipelines;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// The options of a connection's Output pipe on one loop (immutable, so a listener's acceptor on that loop shares one
/// instance between all its connections instead of making one per connection). Input is no <see cref="Pipe"/>: see
/// <see cref="ConnectionInput"/>.
/// </summary>
internal sealed class ConnectionPipeOptions
{
    public ConnectionPipeOptions(EventLoop loop, ConnectionSettings settings)
    {
        Loop = loop;
        PipeScheduler appScheduler = settings.UnsafePreferInlineScheduling ? PipeScheduler.Inline : PipeScheduler.ThreadPool;
        long maxWrite = settings.MaxWriteBufferSize ?? 0;
        // The loop's own pool unless the settings name one: its blocks are registered with the loop's ring, so large
        // sends from them go zero-copy from fixed buffers.
        Pool = settings.MemoryPool ?? loop.MemoryPool;
        // Segments as large as the pool's blocks (a pipe asking for more than a pool's block size gets unpooled arrays).
        int segmentSize = Math.Min(PinnedBlockMemoryPool.BlockSize, Pool.MaxBufferSize); // the loop's pool: its block size
        // The loop reads Output; the application's continuations run on its own scheduler.
        Output = new PipeOptions(Pool, loop, appScheduler, maxWrite, maxWrite / 2, segmentSize, useSynchronizationContext: false);
    }

    /// <summary>The loop whose thread reads Output.</summary>
    public EventLoop Loop { get; }

    /// <summary>The pool Output rents from (what IMemoryPoolFeature reports).</summary>
    public MemoryPool<byte> Pool { get; }

    public PipeOptions Output { get; }
}
