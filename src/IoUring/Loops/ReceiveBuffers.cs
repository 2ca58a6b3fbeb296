using System.Runtime.CompilerServices;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

/// <summary>The provided-buffer ring a loop's internal receives select from: it hands a completion's bytes to its
/// owner and takes the buffers back, so owners never see a buffer id. Loop thread only.</summary>
/// <remarks>
/// Receive bundles: a completion names only its first buffer; the others are the ring entries after it. That holds
/// while the kernel completes in the order it took the buffers (guaranteed only where
/// <see cref="IoUringCapabilities.HasReceiveBundles"/>). It is checked: an entry written again fails that receive's
/// owner instead of handing it another connection's bytes, and counts in <see cref="LostBuffers"/>.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class ReceiveBuffers : IDisposable
{
    private readonly BufferRing _ring;
    private readonly ReceiveBlockPool _spares;
    private bool _disposed;

    public ReceiveBuffers(Ring ring, int count, int bufferSize, bool poisonReturnedBlocks = false,
        string? origin = null)
    {
        // idle spares: at most twice the ring
        _spares = new ReceiveBlockPool(bufferSize, maxIdle: count, poisonReturnedBlocks, origin);
        ushort groupId = BufferGroupIds.Rent();
        try
        {
            _ring = new BufferRing(ring, groupId, count, bufferSize);
        }
        catch
        {
            BufferGroupIds.Return(groupId);
            throw;
        }
    }

    public int BufferSize => _ring.BufferSize;

    /// <summary>Where blocks taken with <see cref="Take"/> go back, from any thread.</summary>
    public ReceiveBlockPool Spares => _spares;

    /// <summary>Keeps buffer <paramref name="bid"/>'s memory (back to <see cref="Spares"/> when done); a spare block
    /// takes its place in the ring.</summary>
    public ReceiveBlock Take(ushort bid)
    {
        ReceiveBlock spare = _spares.Rent();
        ReceiveBlock taken = _ring.Exchange(bid, spare);
        _spares.OnExchanged(spare, taken);
        return taken;
    }

    /// <summary>The group id for <c>sqe->buf_group</c>; the first call fills the ring.</summary>
    public ushort UseGroup()
    {
        if (!_ring.IsFilled)
        {
            _ring.Fill();
        }
        return _ring.GroupId;
    }

    public long MemoryBytes => _ring.MemoryBytes;

    public long Exhaustions { get; private set; }

    /// <summary>Bundle buffers not found to give back (see the remarks).</summary>
    public int LostBuffers { get; private set; }

    /// <summary>Gives the buffers back even if <paramref name="owner"/> throws: a lost buffer is lost to every
    /// receive.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void Deliver(RingOwner owner, uint kind, int result, uint flags, ulong userData)
    {
        ushort bid = (ushort)(flags >> IORING_CQE_BUFFER_SHIFT);
        if (result <= 0)
        {
            // No bytes (the kernel normally keeps the buffer then): give it back anyway.
            _ring.Recycle(bid);
            owner.HandleCompletion(kind, result, flags, userData);
            return;
        }
        uint position = _ring.PositionOf(bid);
        try
        {
            owner.HandleReceive(kind, new ReceivedBytes(_ring, position, result), flags);
        }
        finally
        {
            GiveBack(bid, position, result);
        }
    }

    // Each entry is read right before its buffer goes back: giving back the earlier ones only writes slots of entries
    // taken before this completion's.
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void GiveBack(ushort firstBid, uint position, int bytes)
    {
        var entries = new ReceivedEntries(_ring, position, bytes);
        bool first = true;
        while (entries.TryNext(out ushort bid, out _))
        {
            _ring.Recycle(bid);
            first = false;
        }
        if (entries.Broken)
        {
            int unaccounted = entries.Remaining;
            if (first)
            {
                _ring.Recycle(firstBid); // the CQE named it: it goes back whatever its entry says now
                unaccounted -= Math.Min(_ring.BufferSize, unaccounted);
            }
            if (unaccounted > 0)
            {
                LostBuffers++; // at least one more buffer held these bytes; which, is no longer known
            }
        }
    }

    /// <summary>Counts an ENOBUFS; false if no buffer came back since this receiver's previous one
    /// (<paramref name="mark"/>, -1 at first), so re-arming now would fail again.</summary>
    public bool OnExhausted(ref int mark)
    {
        Exhaustions++;
        int current = _ring.RecycleMark;
        if (current == mark)
        {
            return false;
        }
        mark = current;
        return true;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void PublishRecycled() => _ring.Publish();

    /// <summary>Tests: gives back a buffer a <see cref="RingHandler"/>'s request took.</summary>
    internal void Recycle(ushort bid) => _ring.Recycle(bid);

    public void Dispose()
    {
        if (!_disposed)
        {
            _disposed = true;
            _spares.OnStopped();
            _ring.Dispose();
            BufferGroupIds.Return(_ring.GroupId);
        }
    }
}
