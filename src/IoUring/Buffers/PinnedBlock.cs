using System.Buffers;

namespace IoUring.Buffers;

/// <summary>
/// One block of a <see cref="PinnedRegion"/>, its own owner and memory manager (renting allocates nothing). The renter
/// holds one reference and every <see cref="Pin"/> another, so a block a zero-copy send still pins returns to the pool
/// only when the kernel is done with it.
/// </summary>
internal sealed unsafe class PinnedBlock(PinnedRegion region, byte* pointer) : MemoryManager<byte>, IMemoryOwner<byte>
{
    private int _references;
    private int _ownerReleased = 1;

    public PinnedRegion Region { get; } = region;

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

    // Pinned object heap: no GCHandle needed.
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
            Region.Pool.Ledger!.Report("a block was unpinned more often than it was pinned");
        }
    }

    protected override void Dispose(bool disposing) { }
}
