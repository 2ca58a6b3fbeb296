using IoUring.Rings;

namespace IoUring.Loops;

/// <summary>The bytes of one receive completion, valid only during <see cref="RingOwner.HandleReceive"/>: one buffer,
/// or with a receive bundle several consecutive ring entries, each filled up to its length. Enumerate it for the
/// buffers' bytes.</summary>
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

    public int Length { get; }

    public Enumerator GetEnumerator() => new(_ring, new ReceivedEntries(_ring, _firstPosition, Length));

    /// <summary>The buffers' bytes, in order.</summary>
    /// <exception cref="InvalidOperationException">From <see cref="MoveNext"/>: a ring entry was reused before the
    /// completion was handled.</exception>
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

        /// <summary>For <see cref="ReceiveBuffers.Take"/>.</summary>
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

/// <summary>Walks the ring entries one receive filled, from its first buffer's position, until its bytes are
/// accounted for; both reading the bytes and giving the buffers back walk them this way.</summary>
internal struct ReceivedEntries(BufferRing ring, uint position, int length)
{
    private uint _position = position;

    public int Remaining { get; private set; } = length;

    /// <summary>An entry was written again since the kernel took it: its buffer is no longer known.</summary>
    public bool Broken { get; private set; }

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
