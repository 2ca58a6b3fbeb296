using System.Buffers;

namespace IoUring.Buffers;

/// <summary>
/// One rent of a <see cref="PinnedBlock"/> under <see cref="PoolDiagnostics"/>. A block is its own owner, so a second
/// dispose after it went to a new renter would release that renter's hold unseen; an owner per rent reports it. The
/// block stays the memory manager, so pins and fixed-buffer lookups work as without it.
/// </summary>
internal sealed class TrackedBlockOwner(PinnedBlock block, BlockLedger ledger) : IMemoryOwner<byte>
{
    private int _disposed;

    public PinnedBlock Block => block;

    public Memory<byte> Memory
    {
        get
        {
            if (Volatile.Read(ref _disposed) != 0)
            {
                ledger.Report("a block's memory was asked for after its return");
            }
            return block.Memory;
        }
    }

    public void Dispose()
    {
        if (Interlocked.Exchange(ref _disposed, 1) != 0)
        {
            ledger.Report("a block was returned twice (its owner disposed again)");
            return;
        }
        ((IDisposable)block).Dispose();
    }
}
