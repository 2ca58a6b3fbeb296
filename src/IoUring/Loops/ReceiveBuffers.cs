using System.Runtime.CompilerServices;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

/// <summary>
/// The provided-buffer ring every internal receive of a loop selects from (IOSQE_BUFFER_SELECT, group of
/// <see cref="UseGroup"/>): hands a completion's bytes to its owner, always takes the buffers back, publishes them
/// before each submit and counts ENOBUFS. Owners never see a buffer id. Loop thread only; disposed after the loop's
/// last completion.
/// </summary>
/// <remarks>
/// Receive bundles: a completion names only its first buffer; the others are the ring entries that followed it, found
/// from the ring position each buffer was last handed over at. That holds while the kernel posts a ring's completions
/// in the order it took the buffers (guaranteed only where <see cref="IoUringCapabilities.HasReceiveBundles"/>). It is
/// checked, not trusted: an entry written again (<see cref="BufferRing.TryGetEntryAt"/>) fails that receive's owner
/// instead of handing it another connection's bytes, and the buffer is counted in <see cref="LostBuffers"/>.
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

    /// <summary>Bytes per buffer.</summary>
    public int BufferSize => _ring.BufferSize;

    /// <summary>Where blocks taken with <see cref="Take"/> go back to, from any thread.</summary>
    public ReceiveBlockPool Spares => _spares;

    /// <summary>
    /// Keeps buffer <paramref name="bid"/> of the completion being delivered: its memory becomes the caller's (back to
    /// <see cref="Spares"/> when done), a spare block takes its place, and the id still goes back after delivery.
    /// </summary>
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

    /// <summary>Bytes of buffer memory in the ring (0 until the first <see cref="UseGroup"/>).</summary>
    public long MemoryBytes => _ring.MemoryBytes;

    /// <summary>Receives that found every buffer taken (ENOBUFS).</summary>
    public long Exhaustions { get; private set; }

    /// <summary>Bundle buffers that could not be found to give back (see the remarks; expected 0).</summary>
    public int LostBuffers { get; private set; }

    /// <summary>
    /// A CQE carrying one of these buffers (IORING_CQE_F_BUFFER): hands its bytes to <paramref name="owner"/>, then
    /// gives the buffers back, also when the owner throws (a lost buffer is lost to every receive of the loop).
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void Deliver(RingOwner owner, uint kind, int result, uint flags, ulong userData)
    {
        ushort bid = (ushort)(flags >> IORING_CQE_BUFFER_SHIFT);
        if (result <= 0)
        {
            // No bytes (the kernel normally keeps the buffer then): give it back and report the result as it is.
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

    // Each entry is read right before its buffer is given back: giving back the earlier ones only writes slots of
    // entries taken before this completion's (see the remarks).
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

    /// <summary>
    /// A receive failed with ENOBUFS: counts it; true if a buffer came back since this receiver's previous exhaustion
    /// (<paramref name="mark"/>, -1 at first; updated), false if re-arming now would fail again (back off first).
    /// </summary>
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

    /// <summary>Makes the buffers given back visible to the kernel (before each submit).</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void PublishRecycled() => _ring.Publish();

    /// <summary>Gives back a buffer taken by a <see cref="RingHandler"/>'s request (tests).</summary>
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
