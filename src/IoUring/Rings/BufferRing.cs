using System.Diagnostics;
using System.Numerics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Rings;

/// <summary>
/// A provided buffer ring (IORING_REGISTER_PBUF_RING): <see cref="Count"/> buffers of <see cref="BufferSize"/>
/// bytes that the kernel picks from for requests with IOSQE_BUFFER_SELECT and this <see cref="GroupId"/>.
/// </summary>
/// <remarks>
/// Ring thread only. The entry ring is native memory, registered in the constructor and freed at dispose (after the
/// loop's last completion). A buffer (a <see cref="ReceiveBlock"/>, pinned) is the kernel's from its entry's publish
/// to the completion naming it; a block handed out by <see cref="Exchange"/> is the taker's.
/// </remarks>
internal sealed unsafe class BufferRing : IDisposable
{
    // The kernel wants the entry ring page-aligned (EINVAL otherwise).
    private static readonly nuint s_pageSize = (nuint)Environment.SystemPageSize;
    private const int TailOffset = 14; // the ring's tail aliases entry 0's resv field

    private readonly Ring _ring;
    private readonly uint _mask;
    private io_uring_buf* _entries;
    private readonly ReceiveBlock[] _blocks; // per buffer id: the memory its entry hands to the kernel
    private ushort _tail;           // local tail: entries written, not necessarily published
    private ushort _publishedTail;
    private uint _position; // the local tail, not wrapped at 65,536
    private readonly uint[] _positionOf; // per buffer id: the position of the entry that last handed it out

    public BufferRing(Ring ring, ushort groupId, int count, int bufferSize)
    {
        if (count <= 0 || count > 32768 || !BitOperations.IsPow2(count))
        {
            throw new ArgumentOutOfRangeException(nameof(count), count,
                "The buffer ring's entry count must be a power of two between 1 and 32768.");
        }
        ArgumentOutOfRangeException.ThrowIfLessThan(bufferSize, 1);
        _ring = ring;
        GroupId = groupId;
        Count = count;
        BufferSize = bufferSize;
        _mask = (uint)count - 1;
        _positionOf = new uint[count];
        _blocks = new ReceiveBlock[count];

        nuint entriesSize = (nuint)(count * sizeof(io_uring_buf));
        _entries = (io_uring_buf*)NativeMemory.AlignedAlloc(RoundUpToPage(entriesSize), s_pageSize);
        NativeMemory.Clear(_entries, entriesSize);
        _ = checked(count * bufferSize + (int)s_pageSize); // the slab Fill makes must be possible

        // SAFETY: _entries stays allocated until Dispose, which unregisters the group first.
        io_uring_buf_reg reg = new() { ring_addr = (ulong)_entries, ring_entries = (uint)count, bgid = groupId };
        int result = ring.TryRegister(IORING_REGISTER_PBUF_RING, &reg, 1);
        if (result < 0)
        {
            FreeMemory();
            int errno = -result;
            if (errno == Errno.ENOMEM)
            {
                throw new IoUringUnavailableException(
                    $"io_uring unavailable: registering the provided buffer ring ({count} x {bufferSize} bytes) " +
                    "failed with ENOMEM; check RLIMIT_MEMLOCK.", errno);
            }
            if (errno is Errno.EINVAL or Errno.ENOENT)
            {
                throw new IoUringUnavailableException(
                    "io_uring unavailable: the kernel refused a provided buffer ring (IORING_REGISTER_PBUF_RING, " +
                    $"{IoUringException.ErrnoName(errno)}); Linux 6.0 or later is required.", errno);
            }
            throw IoUringException.FromErrno("IORING_REGISTER_PBUF_RING", errno);
        }

    }

    /// <summary>Until <see cref="Fill"/>, a receive selecting from the ring fails with ENOBUFS.</summary>
    public bool IsFilled { get; private set; }

    public long MemoryBytes => IsFilled ? (long)Count * BufferSize : 0;

    /// <summary>Makes the buffers and hands them to the kernel, at the first receive: a loop that never receives
    /// holds no buffer memory.</summary>
    public void Fill()
    {
        Debug.Assert(!IsFilled, "a buffer ring is filled once");
        // One slab, its first block on a page boundary (the pinned heap aligns arrays to 8 bytes only).
        byte[] slab = GC.AllocateUninitializedArray<byte>(Count * BufferSize + (int)s_pageSize, pinned: true);
        int start = (int)(((nuint)s_pageSize - (nuint)ReceiveBlock.AddressOf(slab, 0) % s_pageSize) % s_pageSize);
        IsFilled = true;
        for (int bid = 0; bid < Count; bid++)
        {
            _blocks[bid] = new ReceiveBlock(slab, start + bid * BufferSize);
            Recycle((ushort)bid);
        }
        Publish();
    }

    public ushort GroupId { get; }
    public int Count { get; }
    public int BufferSize { get; }

    internal nuint RingAddress => (nuint)_entries;

    /// <summary>Changes whenever a buffer is given back (wraps after 65,536).</summary>
    public ushort RecycleMark => _tail;

    public int UnpublishedCount => (ushort)(_tail - _publishedTail);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public Span<byte> GetBuffer(ushort bid, int length)
    {
        Debug.Assert(bid < Count && (uint)length <= (uint)BufferSize);
        return _blocks[bid].Array.AsSpan(_blocks[bid].Offset, length);
    }

    /// <summary>Takes buffer <paramref name="bid"/>'s memory out after its completion; the id goes back with
    /// <paramref name="replacement"/> at its next <see cref="Recycle"/>.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public ReceiveBlock Exchange(ushort bid, ReceiveBlock replacement)
    {
        Debug.Assert(bid < Count && replacement.Array.Length - replacement.Offset >= BufferSize);
        ReceiveBlock taken = _blocks[bid];
        _blocks[bid] = replacement;
        return taken;
    }

    /// <summary>Takes effect at the next <see cref="Publish"/>.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void Recycle(ushort bid)
    {
        Debug.Assert(bid < Count && IsFilled, "only a filled ring's buffers go back");
        Debug.Assert(_entries != null, "recycle into a disposed buffer ring");
        io_uring_buf* entry = &_entries[_tail & _mask];
        // Field by field: entry 0's resv is the ring tail, which only Publish writes.
        // SAFETY: the block is a pinned array held in _blocks until Exchange, after the completion naming bid.
        entry->addr = (ulong)_blocks[bid].Address;
        entry->len = (uint)BufferSize;
        entry->bid = bid;
        _positionOf[bid] = _position++;
        _tail++;
    }

    public uint PositionOf(ushort bid) => _positionOf[bid];

    /// <summary>
    /// The buffer taken from ring position <paramref name="position"/> (a bundle takes consecutive entries), unless a
    /// recycle reused the slot since, and the entry's length: the kernel may shorten an entry to a bundle's limit.
    /// </summary>
    public bool TryGetEntryAt(uint position, out ushort bid, out int length)
    {
        io_uring_buf* entry = &_entries[position & _mask];
        bid = entry->bid;
        length = (int)Math.Min(entry->len, (uint)BufferSize);
        return bid < Count && _positionOf[bid] == position;
    }

    /// <summary>Makes every recycled buffer visible with one store-release of the tail.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void Publish()
    {
        Debug.Assert(_entries != null || _tail == _publishedTail, "publish into a disposed buffer ring");
        if (_tail != _publishedTail)
        {
            Volatile.Write(ref *(ushort*)((byte*)_entries + TailOffset), _tail);
            _publishedTail = _tail;
        }
    }

    public void Dispose()
    {
        if (_entries == null)
        {
            return;
        }
        if (!_ring.IsDisposed)
        {
            io_uring_buf_reg reg = new() { bgid = GroupId };
            _ = _ring.TryRegister(IORING_UNREGISTER_PBUF_RING, &reg, 1);
        }
        FreeMemory();
    }

    private void FreeMemory()
    {
        NativeMemory.AlignedFree(_entries);
        _entries = null;
    }

    private static nuint RoundUpToPage(nuint size) => (size + s_pageSize - 1) & ~(s_pageSize - 1);
}
