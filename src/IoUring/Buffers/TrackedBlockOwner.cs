using System.Buffers;

namespace IoUring.Buffers;

/// <summary>
/// One rent of a <see cref="PinnedBlock"/> under <see cref="PoolDiagnostics"/> (test mode only). A
/// block is its own owner, so a renter that disposed it after the block went to someone else would release the new
/// renter's hold unseen; an owner per rent makes that second dispose a double return, reported at once. Its memory is
/// the block's own (the block stays its memory manager, so pins and fixed-buffer lookups work as without it).
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
