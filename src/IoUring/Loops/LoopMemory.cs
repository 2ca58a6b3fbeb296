using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>A loop's pinned pools, made at first use: the main one, whose regions it registers as fixed buffers on
/// the loop thread, and the 64 KiB one for large writes. Any thread may rent.</summary>
[SupportedOSPlatform("linux")]
internal sealed unsafe class LoopMemory(EventLoop loop, int blockSize, bool poisonReturnedBlocks, string? origin)
    : IRegionRegistrar
{
    public const int LargeBlockSize = 64 * 1024;

    private RegisteredBufferTable? _table; // loop thread: made at start, dropped at the ring's close
    private PinnedBlockMemoryPool? _pool;
    private PinnedBlockMemoryPool? _largePool;

    public RegisteredBufferTable? Table => _table;

    public PinnedBlockMemoryPool Pool => Volatile.Read(ref _pool) ?? Create(ref _pool, this, blockSize);

    public PinnedBlockMemoryPool? PoolIfCreated => Volatile.Read(ref _pool);

    /// <summary>Blocks for large writes (SendFileAsync reads 64 KiB at a time), not registered: ArrayPool's per-core
    /// store did not keep up.</summary>
    public PinnedBlockMemoryPool LargePool
        => Volatile.Read(ref _largePool) ?? Create(ref _largePool, registrar: null, LargeBlockSize);

    public long RentedBytes => Rented(_pool) + Rented(_largePool);

    public long RegisteredBytes => _table?.RegisteredBytes ?? 0;

    public void OpenTable(Ring ring, int injectedErrno, int injectedUnregisterErrno)
    {
        loop.AssertOnLoopThread();
        _table = new RegisteredBufferTable(ring, injectedErrno, injectedUnregisterErrno);
    }

    public int RegisteredIndex(PinnedBlock block)
    {
        loop.AssertOnLoopThread();
        return block.Region.Pool == _pool ? block.Region.BufferIndex : -1;
    }

    public bool TryGetRegisteredIndex(ReadOnlyMemory<byte> memory, out ushort index)
    {
        if (MemoryMarshal.TryGetMemoryManager(memory, out PinnedBlock? block)
            && block.Region.Pool == _pool && block.Region.BufferIndex >= 0)
        {
            index = (ushort)block.Region.BufferIndex;
            return true;
        }
        index = 0;
        return false;
    }

    /// <summary>The ring closes, its table with it. With <paramref name="kernelKeepsPins"/> the blocks still out stay
    /// out for good.</summary>
    public void Shutdown(bool kernelKeepsPins)
    {
        _pool?.Shutdown(kernelKeepsPins);
        _largePool?.Shutdown(kernelKeepsPins);
        _table = null; // counters then report nothing registered
    }

    public void Register(PinnedRegion region) => OnLoop(region, register: true);

    public void Unregister(PinnedRegion region) => OnLoop(region, register: false);

    private void OnLoop(PinnedRegion region, bool register)
    {
        if (loop.IsOnLoopThread)
        {
            Apply(region, register);
            return;
        }
        loop.Schedule(static s =>
        {
            var (self, r, registering) = ((LoopMemory, PinnedRegion, bool))s!;
            self.Apply(r, registering);
        }, (this, region, register));
    }

    private void Apply(PinnedRegion region, bool register)
    {
        if (register)
        {
            RegisterNow(region);
        }
        else
        {
            UnregisterNow(region);
        }
    }

    private void RegisterNow(PinnedRegion region)
    {
        // After the stop the work runs elsewhere (the ring is gone): the region stays unregistered.
        if (!loop.IsOnLoopThread || loop.IsStopping || region.IsDropped || _table is not { } table)
        {
            return;
        }
        Debug.Assert(region.BufferIndex < 0, "a region registered twice");
        // SAFETY: the region's pinned array outlives its entry: UnregisterNow empties it before releasing the pages.
        if (table.TryRegister(region.Start, PinnedRegion.Length, out ushort index))
        {
            region.BufferIndex = index;
        }
    }

    private void UnregisterNow(PinnedRegion region)
    {
        // The pages go back only once no table holds them; an entry left in place (refused, or emptied later by the
        // ring's close) keeps them until the GC takes the array.
        bool held = region.BufferIndex >= 0;
        if (held && loop.IsOnLoopThread && !loop.IsStopping && _table is { } table)
        {
            held = !table.TryUnregister((ushort)region.BufferIndex, PinnedRegion.Length);
        }
        region.BufferIndex = -1;
        if (!held)
        {
            region.ReleasePages();
        }
    }

    private PinnedBlockMemoryPool Create(ref PinnedBlockMemoryPool? field, IRegionRegistrar? registrar, int size)
    {
        var pool = new PinnedBlockMemoryPool(registrar: registrar, poisonReturnedBlocks: poisonReturnedBlocks,
            blockSize: size, origin: origin)
        {
            OwnedByLoop = true, // users reach it through public properties: their Dispose must not end it
        };
        if (Interlocked.CompareExchange(ref field, pool, null) is { } existing)
        {
            pool.Shutdown();
            return existing;
        }
        Debug.Assert(ReferenceEquals(Volatile.Read(ref field), pool), "the pool published is the one made");
        return pool;
    }

    private static long Rented(PinnedBlockMemoryPool? pool)
        => pool is null ? 0 : (long)pool.RentedBlocks * pool.BlockBytes;
}
