using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>
/// The bytes of one receive completion, valid only during <see cref="RingOwner.HandleReceive"/>: one buffer of the
/// loop's <see cref="ReceiveBuffers"/>, or with a receive bundle (IORING_RECVSEND_BUNDLE) several, which the kernel
/// took from consecutive ring entries and filled in order, each up to its entry's length. Enumerate it for the buffers'
/// bytes.
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

    public Enumerator GetEnumerator() => new(_ring, new ReceivedEntries(_ring, _firstPosition, Length));

    /// <summary>The buffers' bytes, in order.</summary>
    /// <exception cref="InvalidOperationException">(From <see cref="MoveNext"/>) a ring entry of this completion was
    /// written again before the completion was handled: which buffer holds these bytes is no longer known.</exception>
    public ref struct Enumerator
    {
        private readonly BufferRing _ring;
        private ReceivedEntries _entries; // mutable struct: never readonly

        internal Enumerator(BufferRing ring, ReceivedEntries entries)
        {
            _ring = ring;
            _entries = entries;
        }

        public ReadOnlySpan<byte> Current { get; private set; }

        /// <summary>The id of the buffer <see cref="Current"/> lies in (to take it:
        /// <see cref="ReceiveBuffers.Take"/>).</summary>
        public ushort CurrentBufferId { get; private set; }

        public bool MoveNext()
        {
            if (_entries.TryNext(out ushort bid, out int length))
            {
                Current = _ring.GetBuffer(bid, length);
                CurrentBufferId = bid;
                return true;
            }
            if (_entries.Broken)
            {
                throw new InvalidOperationException(
                    "A receive's ring entry was reused before its completion was handled; its bytes cannot be found.");
            }
            return false;
        }
    }
}

/// <summary>
/// The ring entries one receive completion filled, walked in order from its first buffer's ring position: each entry
/// holds up to its own length, until the completion's bytes are accounted for. Both reading the bytes
/// (<see cref="ReceivedBytes"/>) and giving the buffers back (<see cref="ReceiveBuffers"/>) walk them this way.
/// </summary>
internal struct ReceivedEntries(BufferRing ring, uint position, int length)
{
    private uint _position = position;

    /// <summary>Bytes not yet accounted for by the entries walked so far.</summary>
    public int Remaining { get; private set; } = length;

    /// <summary>The walk stopped at an entry written again since the kernel took it (its buffer is no longer
    /// known).</summary>
    public bool Broken { get; private set; }

    /// <summary>The next entry's buffer and the bytes it holds; false at the end, or when the walk is
    /// <see cref="Broken"/>.</summary>
    public bool TryNext(out ushort bid, out int length)
    {
        length = 0;
        if (Remaining <= 0 || Broken)
        {
            bid = 0;
            return false;
        }
        if (!ring.TryGetEntryAt(_position, out bid, out int entryLength) || entryLength <= 0)
        {
            Broken = true;
            return false;
        }
        length = Math.Min(entryLength, Remaining);
        Remaining -= length;
        _position++;
        return true;
    }
}
