using System.Buffers;
using System.Diagnostics;

namespace IoUring.Buffers;

/// <summary>
/// Fixed-size blocks carved from <see cref="PinnedRegion"/>s on the pinned object heap, so memory handed to the kernel
/// never moves. A loop's own pool registers each region with its ring (<see cref="IRegionRegistrar"/>), so a send can
/// name it as a fixed buffer.
/// </summary>
/// <remarks>
/// <para>Returned blocks are kept; every <see cref="TrimInterval"/> the regions with no rent in the interval are
/// unregistered and their pages madvised away (the GC would keep them committed).</para>
/// <para>Blocks come from one region until it is empty, then from the partly used region with the most free blocks,
/// so a connection's blocks mostly share one fixed buffer and idle regions stay idle until trimmed.</para>
/// <para>A block is free again only when its renter and every pin (a zero-copy send until its notification) let go.
/// Regions are GC memory: a block held after the pool is disposed stays valid.</para>
/// </remarks>
internal sealed class PinnedBlockMemoryPool : MemoryPool<byte>
{
    public const int BlockSize = 16 * 1024; // a quarter of the iovecs and pool traffic of 4 KiB blocks

    /// <summary>One registered buffer: the unit of growth, registration and trimming.</summary>
    public const int RegionSize = 256 * 1024;

    private const int MinBlockSize = 4096;

    public static readonly TimeSpan TrimInterval = TimeSpan.FromSeconds(10);

    private readonly IRegionRegistrar? _registrar;
    private readonly Lock _lock = new();
    private readonly List<PinnedRegion> _regions = [];
    private PinnedRegion? _current;   // rented from until empty
    private int _freeCount;     // of all regions
    private readonly ITimer? _trimTimer;
    private int _rented;
    private int _peakRented;
    private bool _disposed;
    private readonly BlockLedger? _ledger; // PoolDiagnostics only

    /// <param name="trim">Whether a timer trims unused regions (off in tests that count blocks).</param>
    /// <param name="registrar">Registers each new region with a ring (a loop's own pool), or null.</param>
    /// <param name="poisonReturnedBlocks">Fill returned blocks with <see cref="PoisonByte"/> (tests).</param>
    /// <param name="blockSize">A power of two from 4 KiB to <see cref="RegionSize"/>.</param>
    /// <param name="origin">Where the pool's owner was made, for <see cref="PoolDiagnostics"/>' reports.</param>
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
            // Weak: an abandoned pool is collected, and its timer with it.
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

    public int BlockBytes { get; }

    public int BlocksPerRegion { get; }

    /// <summary>Includes blocks a zero-copy send still pins.</summary>
    public int RentedBlocks => Volatile.Read(ref _rented);

    public int PeakRentedBlocks => Volatile.Read(ref _peakRented);

    public void ResetPeak() => Volatile.Write(ref _peakRented, RentedBlocks);

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

    internal bool PoisonReturnedBlocks { get; }

    internal const byte PoisonByte = 0xDB;

    internal BlockLedger? Ledger => _ledger;

    internal bool LockHeld => _lock.IsHeldByCurrentThread;

    /// <summary>The block, or under <see cref="PoolDiagnostics"/> its owner's block.</summary>
    internal static PinnedBlock BlockOf(IMemoryOwner<byte> owner)
        => owner as PinnedBlock ?? ((TrackedBlockOwner)owner).Block;

    public override IMemoryOwner<byte> Rent(int minBufferSize = -1)
    {
        if (minBufferSize > BlockBytes)
        {
            throw new ArgumentOutOfRangeException(nameof(minBufferSize), minBufferSize,
                $"Blocks are {BlockBytes} bytes.");
        }
        PinnedBlock block;
        PinnedRegion? added = null;
        lock (_lock)
        {
            PinnedRegion? region = _current;
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

    /// <summary>Drops the regions with no rent since the last trim; returns the blocks dropped.</summary>
    internal int Trim()
    {
        List<PinnedRegion>? dropped = null;
        lock (_lock)
        {
            for (int i = _regions.Count - 1; i >= 0; i--)
            {
                PinnedRegion region = _regions[i];
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
        foreach (PinnedRegion region in dropped)
        {
            if (_registrar is null)
            {
                region.ReleasePages();
            }
            else
            {
                // empties the entry first: the pages go only once the kernel no longer maps them
                _registrar.Unregister(region);
            }
        }
        return dropped.Count * BlocksPerRegion;
    }

    /// <summary>The partly used region with the most free blocks, else a fully free one, else null.</summary>
    private PinnedRegion? NextRegion()
    {
        Debug.Assert(_lock.IsHeldByCurrentThread, "called without the lock");
        if (_freeCount == 0)
        {
            return null;
        }
        PinnedRegion? best = null, idle = null;
        foreach (PinnedRegion region in _regions)
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

    /// <summary>After <see cref="Shutdown"/>: untracked and unregistered.</summary>
    private PinnedRegion AddRegion()
    {
        Debug.Assert(_lock.IsHeldByCurrentThread, "called without the lock");
        var region = new PinnedRegion(this);
        if (!_disposed)
        {
            _regions.Add(region);
            _freeCount += BlocksPerRegion;
        }
        return region;
    }

    internal void Return(PinnedBlock block)
    {
        if (PoolDiagnostics.Enabled && !_ledger!.OnReturn(block, 0, block.GetSpan()))
        {
            return; // returned twice: reported, and kept off the free list
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

    /// <summary>A loop's own pool: users' Dispose does nothing; the loop calls <see cref="Shutdown"/>.</summary>
    internal bool OwnedByLoop { get; init; }

    protected override void Dispose(bool disposing)
    {
        if (!OwnedByLoop)
        {
            Shutdown();
        }
    }

    /// <summary>Stops pooling: free blocks go to the GC, returned ones are dropped. Renting still works, unregistered
    /// (a connection still writing after its loop stopped must not fail).</summary>
    /// <param name="kernelKeepsPins">Zero-copy notifications still pin blocks: those stay out for good, not
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
                _ledger!.KeepOutstanding(static key => key is PinnedBlock { OwnerReleased: true });
            }
            _ledger!.OnStopped();
        }
    }
}
