using System.Buffers;
using System.Collections.Concurrent;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace IoUring.Net;

/// <summary>
/// A pool of fixed-size blocks on the pinned object heap. Pipes of io_uring connections use it so that memory
/// handed to the kernel for a send never moves and pinning it costs nothing (no GCHandle per send).
/// </summary>
/// <remarks>
/// Every returned block is kept, so a working set of any size is served without allocating once warm (a fixed cap
/// made 64 connections echoing 1 MiB allocate megabytes per round). What sat unused is trimmed instead: every
/// <see cref="TrimInterval"/>, the blocks that stayed free through the whole interval (the interval's lowest free
/// count) are left to the GC, so a burst's memory goes back within two intervals of the burst's end.
/// </remarks>
internal sealed class PinnedBlockMemoryPool : MemoryPool<byte>
{
    /// <summary>16 KiB: a quarter of the segments (pool traffic, iovecs, CQE-to-pipe copies) of 4 KiB blocks for bulk
    /// transfers, while a connection holds blocks only while it has bytes buffered.</summary>
    public const int BlockSize = 16 * 1024;

    /// <summary>How often free blocks that nobody needed are trimmed.</summary>
    public static readonly TimeSpan TrimInterval = TimeSpan.FromSeconds(10);

    private readonly ConcurrentQueue<Block> _blocks = new();
    private readonly ITimer? _trimTimer;
    private int _rented;
    private int _retained;
    private int _lowestRetained; // since the last trim; updated racily, a heuristic needs no more
    private bool _disposed;

    /// <param name="trim">Whether a timer trims unused free blocks (tests turn it off to count blocks exactly).</param>
    public PinnedBlockMemoryPool(bool trim = true)
    {
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

    public override int MaxBufferSize => BlockSize;

    /// <summary>Blocks rented and not yet returned (the tests' leak check).</summary>
    public int RentedBlocks => Volatile.Read(ref _rented);

    /// <summary>Free blocks held for reuse.</summary>
    public int RetainedBlocks => Volatile.Read(ref _retained);

    public override IMemoryOwner<byte> Rent(int minBufferSize = -1)
    {
        if (minBufferSize > BlockSize)
        {
            throw new ArgumentOutOfRangeException(nameof(minBufferSize), minBufferSize, $"Blocks are {BlockSize} bytes.");
        }
        if (_blocks.TryDequeue(out Block? block))
        {
            int retained = Interlocked.Decrement(ref _retained);
            if (retained < _lowestRetained)
            {
                _lowestRetained = retained;
            }
        }
        else
        {
            block = new Block(this);
            _lowestRetained = 0;
        }
        Interlocked.Increment(ref _rented);
        block.OnRented();
        return block;
    }

    /// <summary>Drops the free blocks that were not needed since the last trim.</summary>
    internal int Trim()
    {
        int unused = Math.Min(_lowestRetained, RetainedBlocks);
        int dropped = 0;
        while (dropped < unused && _blocks.TryDequeue(out _))
        {
            Interlocked.Decrement(ref _retained);
            dropped++;
        }
        _lowestRetained = RetainedBlocks;
        return dropped;
    }

    private void Return(Block block)
    {
        Interlocked.Decrement(ref _rented);
        if (!_disposed)
        {
            Interlocked.Increment(ref _retained);
            _blocks.Enqueue(block);
        }
    }

    protected override void Dispose(bool disposing)
    {
        _disposed = true;
        _trimTimer?.Dispose();
        _blocks.Clear();
        Volatile.Write(ref _retained, 0);
    }

    /// <summary>
    /// One pinned block; it is its own owner and memory manager, so renting allocates nothing once warm.
    /// Reference counted: the renter holds one reference and every <see cref="Pin"/> another, so a block that the
    /// pipe gave back while a zero-copy send still pins it returns to the pool only when the kernel is done with it.
    /// </summary>
    internal sealed unsafe class Block(PinnedBlockMemoryPool pool) : MemoryManager<byte>, IMemoryOwner<byte>
    {
        private readonly byte[] _array = GC.AllocateUninitializedArray<byte>(BlockSize, pinned: true);
        private int _references;
        private int _ownerReleased;

        public override Span<byte> GetSpan() => _array;

        public override Memory<byte> Memory => CreateMemory(BlockSize);

        internal void OnRented()
        {
            _references = 1;
            _ownerReleased = 0;
        }

        // The array lives on the pinned object heap: its address is stable, so no GCHandle is needed.
        public override MemoryHandle Pin(int elementIndex = 0)
        {
            Interlocked.Increment(ref _references);
            return new MemoryHandle((byte*)Unsafe.AsPointer(ref MemoryMarshal.GetArrayDataReference(_array)) + elementIndex, pinnable: this);
        }

        public override void Unpin() => ReleaseReference();

        protected override bool TryGetArray(out ArraySegment<byte> segment)
        {
            segment = new ArraySegment<byte>(_array);
            return true;
        }

        void IDisposable.Dispose()
        {
            if (Interlocked.Exchange(ref _ownerReleased, 1) == 0)
            {
                ReleaseReference();
            }
        }

        private void ReleaseReference()
        {
            if (Interlocked.Decrement(ref _references) == 0)
            {
                pool.Return(this);
            }
        }

        protected override void Dispose(bool disposing) { }
    }
}
