using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>
/// The bytes of one receive completion, valid only during <see cref="RingOwner.HandleReceive"/>: one buffer of the
/// loop's <see cref="ReceiveBuffers"/>, or with a receive bundle (IORING_RECVSEND_BUNDLE) several, which the kernel took
/// from consecutive ring entries and filled in order, each up to its entry's length. Enumerate it for the buffers' bytes.
/// </summary>
internal readonly ref struct ReceivedBytes
{
    private readonly BufferRing _ring;
    private readonly uint _firstPosition;

    internal ReceivedBytes(BufferRing ring, uint firstPosition, int length)
    {
        _ring = ring;
        _firstPosition = firstPosition;
        Length = length;
    }

    /// <summary>All the bytes received.</summary>
    public int Length { get; }

    public Enumerator GetEnumerator() => new(_ring, _firstPosition, Length);

    /// <summary>The buffers' bytes, in order.</summary>
    /// <exception cref="InvalidOperationException">(From <see cref="MoveNext"/>) a ring entry of this completion was
    /// written again before the completion was handled: which buffer holds these bytes is no longer known.</exception>
    public ref struct Enumerator
    {
        private readonly BufferRing _ring;
        private uint _position;
        private int _remaining;

        internal Enumerator(BufferRing ring, uint position, int length)
        {
            _ring = ring;
            _position = position;
            _remaining = length;
        }

        public ReadOnlySpan<byte> Current { get; private set; }

        public bool MoveNext()
        {
            if (_remaining <= 0)
            {
                return false;
            }
            if (!_ring.TryGetEntryAt(_position, out ushort bid, out int length) || length <= 0)
            {
                throw new InvalidOperationException("A receive's ring entry was reused before its completion was handled; its bytes cannot be found.");
            }
            int take = Math.Min(length, _remaining);
            Current = _ring.GetBuffer(bid, take);
            _remaining -= take;
            _position++;
            return true;
        }
    }
}
