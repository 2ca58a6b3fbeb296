using System.Buffers;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Buffers;

/// <summary>
/// A pool of fixed-size blocks carved from large regions on the pinned object heap. Pipes of io_uring connections use
/// it so that memory handed to the kernel for a send never moves and pinning it costs nothing (no GCHandle per send).
/// A loop's own pool also registers each region with the loop's ring (<see cref="IRegionRegistrar"/>), so a send from a
/// block can name it as a fixed buffer and the kernel skips pinning its pages per request.
/// </summary>
/// <remarks>
/// <para>Every returned block is kept, so a working set of any size is served without allocating once warm (a fixed cap
/// made 64 connections echoing 1 MiB allocate megabytes per round). What sat unused is trimmed instead: every
/// <see cref="TrimInterval"/>, the regions none of whose blocks was rented during the whole interval are unregistered,
/// their pages given back to the operating system (madvise DONTNEED: resident memory falls at once, where the GC would
/// keep a dropped array's pages committed until some later collection) and the arrays left to the GC. So a burst's
/// memory goes back within two intervals of the burst's end, except the regions where some block is still held (one
/// long-held block keeps its whole region).</para>
/// <para>Blocks are rented from one region until it has none free, then from the partly used region with the most
/// free blocks (a fully free one only when no partly used one has any): a connection's consecutive blocks then mostly
/// share a region, so a gather send from them names one fixed buffer, and idle regions stay idle until trimmed.</para>
/// <para>A block is reference counted (the renter, and each pin: a zero-copy send pins until its notification), and
/// comes back to the free list only when both the renter and every pin let go: a block is never reused while the
/// kernel may still read it. Regions are GC memory: a block someone still holds after the pool is disposed stays
/// valid.</para>
/// </remarks>
internal sealed class PinnedBlockMemoryPool : MemoryPool<byte>
{
    /// <summary>The default block size, 16 KiB: a quarter of the segments (pool traffic, iovecs, CQE-to-pipe copies) of
    /// 4 KiB blocks for bulk transfers, while a connection holds blocks only while it has bytes buffered.</summary>
    public const int BlockSize = 16 * 1024;

    /// <summary>256 KiB: one registered buffer each (the unit of growth, registration and trimming).</summary>
    public const int RegionSize = 256 * 1024;

    private const int MinBlockSize = 4096;

    /// <summary>Regions start on a page of the system's size (16 or 64 KiB on some arm64 kernels), so registration pins
    /// and madvise releases whole pages of the region's own.</summary>
    private static readonly int s_pageSize = Environment.SystemPageSize;

    /// <summary>How often regions that nobody needed are trimmed.</summary>
    public static readonly TimeSpan TrimInterval = TimeSpan.FromSeconds(10);

    private readonly IRegionRegistrar? _registrar;
    private readonly Lock _lock = new();
    private readonly List<Region> _regions = [];
    private Region? _current;   // rented from until empty: consecutive rents share a region (one fixed buffer)
    private int _freeCount;     // free blocks of all regions
    private readonly ITimer? _trimTimer;
    private int _rented;
    private int _peakRented;
    private bool _disposed;
    private readonly BlockLedger? _ledger; // PoolDiagnostics only

    /// <param name="trim">Whether a timer trims unused regions (tests turn it off to count blocks exactly).</param>
    /// <param name="registrar">Registers each new region with a ring (a loop's own pool), or null.</param>
    /// <param name="poisonReturnedBlocks">Fill every returned block with <see cref="PoisonByte"/> (tests).</param>
    /// <param name="blockSize">Bytes per block: a power of two from 4 KiB to <see cref="RegionSize"/>.</param>
    /// <param name="origin">Where the pool's owner was made, named in <see cref="PoolDiagnostics"/>' reports.</param>
    public PinnedBlockMemoryPool(bool trim = true, IRegionRegistrar? registrar = null,
        bool poisonReturnedBlocks = false, int blockSize = BlockSize, string? origin = null)
    {
        if (blockSize < MinBlockSize || blockSize > RegionSize || !int.IsPow2(blockSize))
        {
            throw new ArgumentOutOfRangeException(nameof(blockSize), blockSize,
                $"A power of two from {MinBlockSize} to {RegionSize}.");
        }
        BlockBytes = blockSize;
        BlocksPerRegion = RegionSize / blockSize;
        _registrar = registrar;
        PoisonReturnedBlocks = poisonReturnedBlocks;
        if (PoolDiagnostics.Enabled)
        {
            _ledger = new BlockLedger($"pinned pool of {blockSize} B blocks", PoisonByte, origin);
        }
        if (trim)
        {
            // Weakly referenced: an abandoned pool is collected and its timer with it.
            var self = new WeakReference<PinnedBlockMemoryPool>(this);
            _trimTimer = TimeProvider.System.CreateTimer(static s =>
            {
                if (((WeakReference<PinnedBlockMemoryPool>)s!).TryGetTarget(out PinnedBlockMemoryPool? pool))
                {
                    pool.Trim();
                }
            }, self, TrimInterval, TrimInterval);
        }
    }

    public override int MaxBufferSize => BlockBytes;

    /// <summary>Bytes per block.</summary>
    public int BlockBytes { get; }

    /// <summary>Blocks per region.</summary>
    public int BlocksPerRegion { get; }

    /// <summary>Blocks rented and not yet returned, including those a zero-copy send still pins (the tests' leak
    /// check).</summary>
    public int RentedBlocks => Volatile.Read(ref _rented);

    /// <summary>The most blocks rented at once since the last <see cref="ResetPeak"/> (tests' memory bounds).</summary>
    public int PeakRentedBlocks => Volatile.Read(ref _peakRented);

    public void ResetPeak() => Volatile.Write(ref _peakRented, RentedBlocks);

    /// <summary>Free blocks held for reuse.</summary>
    public int RetainedBlocks
    {
        get
        {
            lock (_lock)
            {
                return _freeCount;
            }
        }
    }

    /// <summary>Regions held (each <see cref="BlocksPerRegion"/> blocks).</summary>
    public int Regions
    {
        get
        {
            lock (_lock)
            {
                return _regions.Count;
            }
        }
    }

    /// <summary>Whether returned blocks are filled with <see cref="PoisonByte"/> (a test mode: bytes sent from a block
    /// after its return show up).</summary>
    internal bool PoisonReturnedBlocks { get; }

    internal const byte PoisonByte = 0xDB;

    /// <summary>This pool's record of its blocks under <see cref="PoolDiagnostics"/> (null when off).</summary>
    internal BlockLedger? Ledger => _ledger;

    /// <summary>The block behind an owner this pool rented (the block itself, or its owner under
    /// <see cref="PoolDiagnostics"/>).</summary>
    internal static Block BlockOf(IMemoryOwner<byte> owner)
        => owner as Block ?? ((TrackedBlockOwner)owner).Block;

    public override IMemoryOwner<byte> Rent(int minBufferSize = -1)
    {
        if (minBufferSize > BlockBytes)
        {
            throw new ArgumentOutOfRangeException(nameof(minBufferSize), minBufferSize,
                $"Blocks are {BlockBytes} bytes.");
        }
        Block block;
        Region? added = null;
        lock (_lock)
        {
            Region? region = _current;
            if (region is null || region.FreeCount == 0)
            {
                region = _current = NextRegion() ?? (added = AddRegion());
            }
            block = region.Pop();
            if (!_disposed)
            {
                _freeCount--;
            }
            region.RentedSinceTrim = true;
        }
        if (added is not null && !_disposed)
        {
            _registrar?.Register(added);
        }
        int rented = Interlocked.Increment(ref _rented);
        for (int peak = Volatile.Read(ref _peakRented); rented > peak; peak = Volatile.Read(ref _peakRented))
        {
            if (Interlocked.CompareExchange(ref _peakRented, rented, peak) == peak)
            {
                break;
            }
        }
        block.OnRented();
        if (PoolDiagnostics.Enabled)
        {
            _ledger!.OnRent(block, 0, block.GetSpan());
            return new TrackedBlockOwner(block, _ledger);
        }
        return block;
    }

    /// <summary>Drops the regions none of whose blocks was rented since the last trim; returns how many blocks
    /// went.</summary>
    internal int Trim()
    {
        List<Region>? dropped = null;
        lock (_lock)
        {
            for (int i = _regions.Count - 1; i >= 0; i--)
            {
                Region region = _regions[i];
                if (region.RentedSinceTrim)
                {
                    region.RentedSinceTrim = false;
                    continue;
                }
                if (region.FreeCount == BlocksPerRegion) // none rented or pinned
                {
                    if (PoolDiagnostics.Enabled)
                    {
                        region.ForgetBlocks(_ledger!);
                    }
                    region.MarkDropped();
                    (dropped ??= []).Add(region);
                    _regions.RemoveAt(i);
                    _freeCount -= BlocksPerRegion;
                    if (_current == region)
                    {
                        _current = null;
                    }
                }
            }
        }
        if (dropped is null)
        {
            return 0;
        }
        foreach (Region region in dropped)
        {
            if (_registrar is null)
            {
                region.ReleasePages();
            }
            else
            {
                // forgets its entry, then releases the pages: the kernel no longer maps them
                _registrar.Unregister(region);
            }
        }
        return dropped.Count * BlocksPerRegion;
    }

    /// <summary>Under the lock: the partly used region with the most free blocks, else a fully free one, else
    /// null.</summary>
    private Region? NextRegion()
    {
        Debug.Assert(_lock.IsHeldByCurrentThread, "called without the lock");
        if (_freeCount == 0)
        {
            return null;
        }
        Region? best = null, idle = null;
        foreach (Region region in _regions)
        {
            int free = region.FreeCount;
            if (free == BlocksPerRegion)
            {
                idle ??= region;
            }
            else if (free > 0 && (best is null || free > best.FreeCount))
            {
                best = region;
            }
        }
        return best ?? idle;
    }

    /// <summary>Under the lock: a new region, all its blocks free (after <see cref="Shutdown"/>: untracked,
    /// unregistered).</summary>
    private Region AddRegion()
    {
        Debug.Assert(_lock.IsHeldByCurrentThread, "called without the lock");
        var region = new Region(this);
        if (!_disposed)
        {
            _regions.Add(region);
            _freeCount += BlocksPerRegion;
        }
        return region;
    }

    private void Return(Block block)
    {
        if (PoolDiagnostics.Enabled && !_ledger!.OnReturn(block, 0, block.GetSpan()))
        {
            return; // returned twice: reported, and kept off the free list (two renters would share it)
        }
        if (PoisonReturnedBlocks)
        {
            block.GetSpan().Fill(PoisonByte);
        }
        lock (_lock)
        {
            Interlocked.Decrement(ref _rented);
            if (_disposed || block.Region.IsDropped)
            {
                return;
            }
            block.Region.Push(block);
            _freeCount++;
        }
    }

    /// <summary>A loop's own pool: <see cref="IDisposable.Dispose"/> from users does nothing; the loop calls
    /// <see cref="Shutdown"/>.</summary>
    internal bool OwnedByLoop { get; init; }

    protected override void Dispose(bool disposing)
    {
        if (!OwnedByLoop)
        {
            Shutdown();
        }
    }

    /// <summary>
    /// Stops pooling: the free blocks and regions are let go (to the GC) and returned blocks are dropped. Renting still
    /// works, from regions nobody tracks or registers (a connection still writing after its loop stopped must not
    /// fail).
    /// </summary>
    /// <param name="kernelKeepsPins">The loop stopped with requests (zero-copy notifications) still holding pins:
    /// blocks only they hold stay out for good by design, and <see cref="PoolDiagnostics"/> does not call them
    /// leaks.</param>
    internal void Shutdown(bool kernelKeepsPins = false)
    {
        _trimTimer?.Dispose();
        lock (_lock)
        {
            _disposed = true;
            _freeCount = 0;
            _current = null;
            _regions.Clear();
        }
        if (PoolDiagnostics.Enabled)
        {
            if (kernelKeepsPins)
            {
                _ledger!.KeepOutstanding(static key => key is Block { OwnerReleased: true });
            }
            _ledger!.OnStopped();
        }
    }

    /// <summary>
    /// One region: <see cref="RegionSize"/> bytes of blocks in a single pinned array, page aligned (so a registration
    /// pins whole pages of ours only). <see cref="BufferIndex"/> is its entry in the registrar's ring's buffer table.
    /// </summary>
    internal sealed unsafe class Region
    {
        private readonly byte[] _array; // reachable from every block (through Region): their pointers are into it
        private readonly Block[] _free;  // this region's free blocks, a stack

        public Region(PinnedBlockMemoryPool pool)
        {
            Pool = pool;
            _array = GC.AllocateUninitializedArray<byte>(RegionSize + s_pageSize, pinned: true);
            // The array lives on the pinned object heap: its address is stable for its whole life.
            nuint address = (nuint)Unsafe.AsPointer(ref MemoryMarshal.GetArrayDataReference(_array));
            Start = (byte*)((address + (nuint)s_pageSize - 1) & ~(nuint)(s_pageSize - 1));
            _free = new Block[pool.BlocksPerRegion];
            for (int i = 0; i < _free.Length; i++)
            {
                _free[i] = new Block(this, Start + (_free.Length - 1 - i) * pool.BlockBytes); // the first block on top
            }
            FreeCount = _free.Length;
        }

        public PinnedBlockMemoryPool Pool { get; }

        /// <summary>The first block's address (page aligned); the region spans <see cref="Length"/> bytes from
        /// it.</summary>
        public byte* Start { get; }

        public static int Length => RegionSize;


        /// <summary>The registered-buffer entry, or -1. Written and read on the registrar's ring thread only.</summary>
        public int BufferIndex { get; set; } = -1;

        /// <summary>Trimmed: its blocks are off the free list for good. Set under the pool's lock.</summary>
        public bool IsDropped { get; private set; }

        /// <summary>Under the pool's lock.</summary>
        internal bool RentedSinceTrim { get; set; }

        /// <summary>Under the pool's lock: blocks of this region that are free (neither rented nor pinned).</summary>
        internal int FreeCount { get; private set; }

        /// <summary>Under the pool's lock: the most recently freed block of this region.</summary>
        internal Block Pop()
        {
            Block block = _free[--FreeCount];
            _free[FreeCount] = null!;
            return block;
        }

        /// <summary>Under the pool's lock.</summary>
        internal void Push(Block block) => _free[FreeCount++] = block;

        internal void MarkDropped() => IsDropped = true;

        /// <summary>Under the pool's lock, for a region about to be dropped (all its blocks free): the ledger stops
        /// tracking them.</summary>
        internal void ForgetBlocks(BlockLedger ledger)
        {
            for (int i = 0; i < FreeCount; i++)
            {
                ledger.Forget(_free[i], 0);
            }
        }

        /// <summary>
        /// A dropped region (every block free, no ring's table naming it): its pages go back to the operating system
        /// now; touched again (a use after return, never ours) they come back as zeros, so nothing can fault.
        /// </summary>
        internal void ReleasePages()
        {
            Debug.Assert(IsDropped);
            _ = Libc.madvise(Start, RegionSize, Libc.MADV_DONTNEED); // a refusal only leaves the pages resident
        }
    }

    /// <summary>
    /// One block of a region; it is its own owner and memory manager, so renting allocates nothing once warm.
    /// Reference counted: the renter holds one reference and every <see cref="Pin"/> another, so a block that the
    /// pipe gave back while a zero-copy send still pins it returns to the pool only when the kernel is done with it.
    /// </summary>
    internal sealed unsafe class Block(Region region, byte* pointer) : MemoryManager<byte>, IMemoryOwner<byte>
    {
        private int _references;
        private int _ownerReleased = 1;

        public Region Region { get; } = region;

        /// <summary>The block's first byte (inside <see cref="Region"/>'s pinned array).</summary>
        public byte* Pointer { get; } = pointer;

        public override Span<byte> GetSpan() => new(Pointer, Region.Pool.BlockBytes);

        public override Memory<byte> Memory => CreateMemory(Region.Pool.BlockBytes);

        /// <summary>Its renter let go (pins may still hold it).</summary>
        internal bool OwnerReleased => Volatile.Read(ref _ownerReleased) != 0;

        internal void OnRented()
        {
            _references = 1;
            _ownerReleased = 0;
        }

        // Region memory is on the pinned object heap: its address is stable, so no GCHandle is needed.
        public override MemoryHandle Pin(int elementIndex = 0)
        {
            Interlocked.Increment(ref _references);
            return new MemoryHandle(Pointer + elementIndex, pinnable: this);
        }

        public override void Unpin() => ReleaseReference();

        void IDisposable.Dispose()
        {
            if (Interlocked.Exchange(ref _ownerReleased, 1) == 0)
            {
                ReleaseReference();
            }
        }

        private void ReleaseReference()
        {
            int left = Interlocked.Decrement(ref _references);
            if (left == 0)
            {
                Region.Pool.Return(this);
            }
            else if (left < 0 && PoolDiagnostics.Enabled)
            {
                Region.Pool._ledger!.Report("a block was unpinned more often than it was pinned");
            }
        }

        protected override void Dispose(bool disposing) { }
    }
}

/// <summary>Registers a pool's regions with a ring and forgets them again (a loop, for its own pool).</summary>
internal interface IRegionRegistrar
{
    /// <summary>A new region (any thread): register it when possible; until then its blocks are used
    /// unregistered.</summary>
    void Register(PinnedBlockMemoryPool.Region region);

    /// <summary>A trimmed region (any thread; none of its blocks is rented or pinned): empty its entry, then
    /// <see cref="PinnedBlockMemoryPool.Region.ReleasePages"/>, but only if the entry is empty (while a ring's table
    /// holds the pages, the kernel keeps them).</summary>
    void Unregister(PinnedBlockMemoryPool.Region region);
}
