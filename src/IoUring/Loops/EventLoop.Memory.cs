using System.Buffers;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Rings;

namespace IoUring.Loops;

// The loop's memory pool, whose regions are registered with the ring as fixed buffers.
public sealed unsafe partial class EventLoop
{
    private RegisteredBufferTable? _bufferTable; // made at start, on the loop thread
    private PinnedBlockMemoryPool? _memoryPool;

    /// <summary>
    /// This loop's pool of pinned memory (blocks of <see cref="EventLoopOptions.MemoryBlockSize"/>), registered with
    /// the loop's ring as fixed buffers where the kernel allows it. Connections on this loop use it for their pipes
    /// unless given a pool of their own; custom requests can name its blocks as fixed buffers (see
    /// <see cref="TryGetRegisteredBuffer"/>). Any thread may rent.
    /// </summary>
    public MemoryPool<byte> MemoryPool => _memoryPool ?? CreateMemoryPool();

    /// <summary>The pool, if anything used it yet (null otherwise): tests and metrics read its counts.</summary>
    internal PinnedBlockMemoryPool? MemoryPoolIfCreated => Volatile.Read(ref _memoryPool);

    /// <summary>Bytes per block of <see cref="LargeBlockPool"/>.</summary>
    internal const int LargeBlockSize = 64 * 1024;

    private PinnedBlockMemoryPool? _largeBlockPool;

    /// <summary>
    /// Blocks of <see cref="LargeBlockSize"/> for a connection's writes that ask for more than
    /// <see cref="MemoryPool"/>'s blocks hold (Kestrel's SendFileAsync on the loop reads 64 KiB at a time): pinned,
    /// trimmed when idle as the main pool is, not registered. Without it such writes rented ArrayPool arrays, and 64
    /// connections sending files outran ArrayPool's per-core store: every response allocated (and zeroed) new arrays.
    /// </summary>
    internal PinnedBlockMemoryPool LargeBlockPool => Volatile.Read(ref _largeBlockPool) ?? CreateLargeBlockPool();

    /// <summary>
    /// This loop's pool of 64 KiB pinned blocks, trimmed when idle (not registered with the ring): rent a whole burst
    /// of datagrams from it, fill it and hand it over to <see cref="Net.IoUringUdpSocket.SendSegmentsToAsync(
    /// IMemoryOwner{byte}, int, int, System.Net.SocketAddress, CancellationToken)"/>, which sends it without a copy and
    /// returns the block when the kernel is done. Any thread may rent.
    /// </summary>
    public MemoryPool<byte> LargeMemoryPool => LargeBlockPool;

    private PinnedBlockMemoryPool CreateLargeBlockPool()
    {
        var pool = new PinnedBlockMemoryPool(registrar: null,
            poisonReturnedBlocks: _options.Hooks?.PoisonReturnedMemory ?? false, blockSize: LargeBlockSize,
            origin: _origin)
        {
            OwnedByLoop = true,
        };
        if (Interlocked.CompareExchange(ref _largeBlockPool, pool, null) is { } existing)
        {
            pool.Shutdown();
            return existing;
        }
        return pool;
    }

    /// <summary>The ring's registered-buffer table (null before start).</summary>
    internal RegisteredBufferTable? BufferTable => _bufferTable;

    /// <summary>
    /// Whether <paramref name="memory"/> lies in a block of this loop's <see cref="MemoryPool"/> that is registered
    /// with this loop's ring, and if so the buffer's index: a request sets it in <c>sqe-&gt;buf_index</c> with
    /// IORING_RECVSEND_FIXED_BUF (sends) or uses a READ_FIXED/WRITE_FIXED opcode, and keeps the memory's own address in
    /// <c>sqe-&gt;addr</c>. Registration happens on the loop thread shortly after a region is first used, and is
    /// refused where the kernel says no (RLIMIT_MEMLOCK): the memory is then still usable, only not fixed.
    /// Keep the block rented until the request's final completion (for a zero-copy send, its notification): once every
    /// block of a region is back, the pool may trim the region and the index may later name other memory.
    /// Loop thread only.
    /// </summary>
    public bool TryGetRegisteredBuffer(ReadOnlyMemory<byte> memory, out ushort bufferIndex)
    {
        ThrowIfNotOnLoopThread();
        if (MemoryMarshal.TryGetMemoryManager(memory, out PinnedBlockMemoryPool.Block? block)
            && block.Region.Pool == _memoryPool && block.Region.BufferIndex >= 0)
        {
            bufferIndex = (ushort)block.Region.BufferIndex;
            return true;
        }
        bufferIndex = 0;
        return false;
    }

    /// <summary>The index under which <paramref name="block"/> is registered with this ring, or -1. Loop thread (the
    /// sender's hot path).</summary>
    internal int RegisteredBufferIndex(PinnedBlockMemoryPool.Block block)
        => block.Region.Pool == _memoryPool ? block.Region.BufferIndex : -1;

    private PinnedBlockMemoryPool CreateMemoryPool()
    {
        var pool = new PinnedBlockMemoryPool(registrar: new RegionRegistrar(this),
            poisonReturnedBlocks: _options.Hooks?.PoisonReturnedMemory ?? false, blockSize: _options.MemoryBlockSize,
            origin: _origin)
        {
            OwnedByLoop = true, // users reach it through public properties: their Dispose must not end it
        };
        if (Interlocked.CompareExchange(ref _memoryPool, pool, null) is { } existing)
        {
            pool.Shutdown();
            return existing;
        }
        return pool;
    }

    /// <summary>Registers regions on the loop thread (the ring's single issuer) as the pool adds them, and empties
    /// their entries when it trims them.</summary>
    private sealed class RegionRegistrar(EventLoop loop) : IRegionRegistrar
    {
        public void Register(PinnedBlockMemoryPool.Region region)
            => OnLoop(region, static (self, r) => self.RegisterNow(r));

        public void Unregister(PinnedBlockMemoryPool.Region region)
            => OnLoop(region, static (self, r) => self.UnregisterNow(r));

        /// <summary>Runs <paramref name="action"/> now on the loop thread, or posts it there.</summary>
        private void OnLoop(PinnedBlockMemoryPool.Region region,
            Action<RegionRegistrar, PinnedBlockMemoryPool.Region> action)
        {
            if (loop.IsOnLoopThread)
            {
                action(this, region);
                return;
            }
            loop.Schedule(static s =>
            {
                var (self, r, a) = ((RegionRegistrar, PinnedBlockMemoryPool.Region,
                    Action<RegionRegistrar, PinnedBlockMemoryPool.Region>))s!;
                a(self, r);
            }, (this, region, action));
        }

        private void RegisterNow(PinnedBlockMemoryPool.Region region)
        {
            // After the stop the work runs elsewhere (the ring is gone): the region stays unregistered.
            if (!loop.IsOnLoopThread || loop.IsStopping || region.IsDropped || loop._bufferTable is not { } table)
            {
                return;
            }
            if (table.TryRegister(region.Start, PinnedBlockMemoryPool.Region.Length, out ushort index))
            {
                region.BufferIndex = index;
            }
        }

        private void UnregisterNow(PinnedBlockMemoryPool.Region region)
        {
            // The pages go back only once no table holds them. An entry left as it was (the loop stops: the ring's
            // close empties it later; or the kernel refused) keeps them pinned and charged to RLIMIT_MEMLOCK, and
            // releasing them then would make RSS say they are free: they stay, and the GC takes them with the array.
            bool held = region.BufferIndex >= 0;
            if (held && loop.IsOnLoopThread && !loop.IsStopping && loop._bufferTable is { } table)
            {
                held = !table.TryUnregister((ushort)region.BufferIndex, PinnedBlockMemoryPool.Region.Length);
            }
            region.BufferIndex = -1;
            if (!held)
            {
                region.ReleasePages();
            }
        }
    }
}
