using System.IO.Pipelines;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// The options of the two pipes of a connection on one loop (immutable, so a listener's acceptor on that loop shares
/// one instance between all its connections instead of making two per connection).
/// </summary>
internal sealed class ConnectionPipeOptions
{
    public ConnectionPipeOptions(EventLoop loop, ConnectionSettings settings)
    {
        Loop = loop;
        PipeScheduler appScheduler = settings.UnsafePreferInlineScheduling ? PipeScheduler.Inline : PipeScheduler.ThreadPool;
        long maxRead = settings.MaxReadBufferSize ?? 0;
        long maxWrite = settings.MaxWriteBufferSize ?? 0;
        // Segments as large as the pool's blocks (a pipe asking for more than a pool's block size gets unpooled arrays).
        int segmentSize = Math.Min(PinnedBlockMemoryPool.BlockSize, settings.MemoryPool.MaxBufferSize);
        // The loop writes Input and reads Output; the application's continuations run on its own scheduler.
        Input = new PipeOptions(settings.MemoryPool, appScheduler, loop, maxRead, maxRead / 2, segmentSize, useSynchronizationContext: false);
        Output = new PipeOptions(settings.MemoryPool, loop, appScheduler, maxWrite, maxWrite / 2, segmentSize, useSynchronizationContext: false);
    }

    /// <summary>The loop whose thread writes Input and reads Output.</summary>
    public EventLoop Loop { get; }

    public PipeOptions Input { get; }

    public PipeOptions Output { get; }
}
