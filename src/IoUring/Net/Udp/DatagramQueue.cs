using System.Net;

namespace IoUring.Net;

/// <summary>
/// Copies of datagrams that arrived while no receive waited, oldest first. Each slot keeps its array (grown, never
/// shrunk), so steady state copies without allocating.
/// </summary>
/// <remarks>Not thread-safe: the <see cref="DatagramChannel"/>'s lock guards it.</remarks>
internal sealed class DatagramQueue(int capacity)
{
    private readonly DatagramSlot[] _slots = new DatagramSlot[capacity];
    private int _head;
    private int _count;

    public int Capacity => _slots.Length;

    public int Count => _count;

    public bool IsFull => _count == _slots.Length;

    public bool TryEnqueue(in ReceivedDatagram datagram)
    {
        if (IsFull)
        {
            return false;
        }
        int index = (_head + _count) % _slots.Length;
        DatagramSlot slot = _slots[index] ??= new DatagramSlot();
        ReadOnlySpan<byte> payload = datagram.Payload;
        if (slot.Payload.Length < payload.Length)
        {
            slot.Payload = GC.AllocateUninitializedArray<byte>(Math.Max(payload.Length, 2 * slot.Payload.Length));
        }
        payload.CopyTo(slot.Payload);
        slot.Length = payload.Length;
        slot.DatagramLength = datagram.Length;
        datagram.Source.CopyTo(slot.Name);
        slot.NameLength = datagram.Source.Length;
        datagram.LocalName.CopyTo(slot.LocalName);
        slot.LocalNameLength = datagram.LocalName.Length;
        slot.InterfaceIndex = datagram.InterfaceIndex;
        _count++;
        return true;
    }

    public bool TryDequeue(Span<byte> target, SocketAddress? from, SocketAddress? local, out DatagramResult result)
    {
        if (_count == 0)
        {
            result = default;
            return false;
        }
        DatagramSlot slot = _slots[_head];
        var datagram = new ReceivedDatagram(slot.Payload.AsSpan(0, slot.Length), slot.DatagramLength,
            slot.Name.AsSpan(0, slot.NameLength), slot.LocalName.AsSpan(0, slot.LocalNameLength), slot.InterfaceIndex);
        result = Datagrams.CopyOut(datagram, target, from, local);
        _head = (_head + 1) % _slots.Length;
        _count--;
        return true;
    }
}
