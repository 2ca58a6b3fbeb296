using System.Net;

namespace IoUring.Net;

/// <summary>
/// Copies of datagrams that arrived while no receive waited, oldest first, at most <see cref="Capacity"/>. Each slot
/// keeps its array between datagrams (grown to the largest it held), so a socket in steady state copies without
/// allocating.
/// </summary>
/// <remarks>Not thread-safe: the <see cref="UdpReceiver"/>'s lock guards it.</remarks>
internal sealed class DatagramQueue(int capacity)
{
    private readonly Slot[] _slots = new Slot[capacity];
    private int _head;
    private int _count;

    public int Capacity => _slots.Length;

    public int Count => _count;

    public bool IsFull => _count == _slots.Length;

    /// <summary>Keeps a copy of a datagram; false (nothing kept) when full.</summary>
    public bool TryEnqueue(ReadOnlySpan<byte> payload, int datagramLength, ReadOnlySpan<byte> name)
    {
        if (IsFull)
        {
            return false;
        }
        int index = (_head + _count) % _slots.Length;
        Slot slot = _slots[index] ??= new Slot();
        if (slot.Payload.Length < payload.Length)
        {
            slot.Payload = GC.AllocateUninitializedArray<byte>(Math.Max(payload.Length, 2 * slot.Payload.Length));
        }
        payload.CopyTo(slot.Payload);
        slot.Length = payload.Length;
        slot.DatagramLength = datagramLength;
        name.CopyTo(slot.Name);
        slot.NameLength = name.Length;
        _count++;
        return true;
    }

    /// <summary>Copies the oldest datagram into <paramref name="target"/> (and its source into <paramref name="from"/>)
    /// and drops it.</summary>
    public bool TryDequeue(Span<byte> target, SocketAddress? from, out DatagramResult result)
    {
        if (_count == 0)
        {
            result = default;
            return false;
        }
        Slot slot = _slots[_head];
        result = Datagrams.CopyOut(slot.Payload.AsSpan(0, slot.Length), slot.DatagramLength,
            slot.Name.AsSpan(0, slot.NameLength), target, from);
        _head = (_head + 1) % _slots.Length;
        _count--;
        return true;
    }

    private sealed class Slot
    {
        public byte[] Payload = [];
        public int Length;
        public int DatagramLength;
        public readonly byte[] Name = new byte[Datagrams.NameSpace];
        public int NameLength;
    }
}

/// <summary>The arithmetic of a multishot RECVMSG's buffers, and handing a datagram to a caller.</summary>
internal static class Datagrams
{
    /// <summary>sizeof(struct io_uring_recvmsg_out): the header at the start of each buffer.</summary>
    public const int HeaderSize = 16;

    /// <summary>The room the kernel reserves for the source address after the header (msghdr.msg_namelen): sockaddr_in6
    /// is 28 bytes.</summary>
    public const int NameSpace = 32;

    /// <summary>Where the payload starts in a buffer when no control data is asked for (msg_controllen 0).</summary>
    public const int PayloadOffset = HeaderSize + NameSpace;

    /// <summary>The room for control data with coalesced receives: one cmsghdr and the UDP_GRO segment size (an int,
    /// padded to 8 bytes).</summary>
    public const int CoalescedControlSpace = 16 + 8;

    /// <summary>The largest coalesced burst: a GRO packet is at most 64 KiB.</summary>
    public const int LargestCoalesced = 65_535;

    /// <summary>Copies a datagram into a caller's buffer (cut if it does not fit: the result says so) and its source
    /// into <paramref name="from"/>.</summary>
    public static DatagramResult CopyOut(ReadOnlySpan<byte> payload, int datagramLength, ReadOnlySpan<byte> name,
        Span<byte> target, SocketAddress? from)
    {
        int count = Math.Min(payload.Length, target.Length);
        payload[..count].CopyTo(target);
        if (from is not null)
        {
            name.CopyTo(from.Buffer.Span);
            from.Size = name.Length;
        }
        return new DatagramResult(count, datagramLength);
    }
}
