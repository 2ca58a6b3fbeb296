using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>
/// The bytes of one receive completion, valid only during <see cref="RingOwner.HandleReceive"/>: one buffer of the
/// loop's <see cref="ReceiveBuffers"/>, or with a receive bundle (IORING_RECVSEND_BUNDLE) several, which the kernel
/// took from consecutive ring entries and filled in order (each full but the last).
/// </summary>
internal readonly ref struct ReceivedBytes
{
    private readonly BufferRing _ring;
    private readonly ushort _firstBid;
    private readonly uint _firstPosition;

    internal ReceivedBytes(BufferRing ring, ushort firstBid, uint firstPosition, int length)
    {
        _ring = ring;
        _firstBid = firstBid;
        _firstPosition = firstPosition;
        Length = length;
    }

    /// <summary>All the bytes received.</summary>
    public int Length { get; }

    /// <summary>How many buffers hold them.</summary>
    public int BufferCount => BufferCountOf(Length, _ring.BufferSize);

    internal static int BufferCountOf(int length, int bufferSize) => (int)(((long)length + bufferSize - 1) / bufferSize);

    /// <summary>The bytes of buffer <paramref name="index"/> (0 to <see cref="BufferCount"/> - 1), in order.</summary>
    /// <exception cref="InvalidOperationException">The ring entry that buffer came from was written again before its
    /// completion was handled: which buffer holds these bytes is no longer known (see <see cref="ReceiveBuffers"/>).</exception>
    public ReadOnlySpan<byte> Buffer(int index)
    {
        int size = _ring.BufferSize;
        int length = Math.Min(size, Length - index * size);
        if (index == 0)
        {
            return _ring.GetBuffer(_firstBid, length);
        }
        if (!_ring.TryGetBidAt(_firstPosition + (uint)index, out ushort bid))
        {
            throw new InvalidOperationException("A receive bundle's ring entry was reused before its completion was handled; its bytes cannot be found.");
        }
        return _ring.GetBuffer(bid, length);
    }
}
