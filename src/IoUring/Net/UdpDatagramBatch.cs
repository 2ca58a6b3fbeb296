using System.Diagnostics;
using System.Net;
using System.Net.Sockets;

namespace IoUring.Net;

/// <summary>
/// Slots for several datagrams, each with its own buffer and source address, filled by
/// <see cref="IoUringUdpSocket.ReceiveBatchAsync"/>. Reuse one per receiving loop: receiving allocates nothing.
/// </summary>
public sealed class UdpDatagramBatch
{
    private readonly byte[] _memory;
    private readonly SocketAddress[] _addresses;
    private readonly SocketAddress[] _localAddresses;
    private readonly DatagramResult[] _results;
    private bool _hasLocalAddresses; // the last receive came from a socket that reports local addresses

    /// <summary>A batch of <paramref name="capacity"/> slots of <paramref name="bufferSize"/> bytes each.</summary>
    public UdpDatagramBatch(int capacity, int bufferSize)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(capacity, 1);
        ArgumentOutOfRangeException.ThrowIfLessThan(bufferSize, 1);
        Capacity = capacity;
        BufferSize = bufferSize;
        _memory = GC.AllocateUninitializedArray<byte>(checked(capacity * bufferSize));
        _addresses = new SocketAddress[capacity];
        _localAddresses = new SocketAddress[capacity];
        for (int i = 0; i < capacity; i++)
        {
            _addresses[i] = new SocketAddress(AddressFamily.InterNetworkV6); // room for either family's address
            _localAddresses[i] = new SocketAddress(AddressFamily.InterNetworkV6);
        }
        _results = new DatagramResult[capacity];
    }

    /// <summary>The number of slots.</summary>
    public int Capacity { get; }

    /// <summary>The size of each slot's buffer.</summary>
    public int BufferSize { get; }

    /// <summary>Datagrams the last receive put in slots 0 to Count - 1.</summary>
    public int Count { get; private set; }

    /// <summary>Slot <paramref name="index"/>'s bytes received and datagram length.</summary>
    public DatagramResult GetResult(int index) => _results[CheckIndex(index)];

    /// <summary>Slot <paramref name="index"/>'s bytes received.</summary>
    public Memory<byte> GetPayload(int index)
        => _memory.AsMemory(CheckIndex(index) * BufferSize, _results[index].BytesReceived);

    /// <summary>Slot <paramref name="index"/>'s source address.</summary>
    public SocketAddress GetAddress(int index) => _addresses[CheckIndex(index)];

    /// <summary>Slot <paramref name="index"/>'s local address: where its datagram was sent, with the socket's
    /// port.</summary>
    /// <exception cref="InvalidOperationException">The socket does not report local addresses
    /// (<see cref="IoUringUdpOptions.ReceiveLocalAddress"/>).</exception>
    public SocketAddress GetLocalAddress(int index)
    {
        SocketAddress local = _localAddresses[CheckIndex(index)];
        if (!_hasLocalAddresses)
        {
            throw new InvalidOperationException(
                $"The socket does not report local addresses: set {nameof(IoUringUdpOptions)}." +
                $"{nameof(IoUringUdpOptions.ReceiveLocalAddress)}.");
        }
        return local;
    }

    internal bool IsFull => Count == Capacity;

    internal void Clear(bool localAddresses)
    {
        Count = 0;
        _hasLocalAddresses = localAddresses;
    }

    /// <summary>The next free slot's buffer; <see cref="Commit"/> makes it count.</summary>
    internal Span<byte> NextBuffer => _memory.AsSpan(Count * BufferSize, BufferSize);

    internal SocketAddress NextAddress => _addresses[Count];

    internal SocketAddress NextLocalAddress => _localAddresses[Count];

    internal void Commit(DatagramResult result)
    {
        Debug.Assert(Count < Capacity && result.BytesReceived <= BufferSize, "a datagram committed past the batch");
        _results[Count++] = result;
    }

    private int CheckIndex(int index)
    {
        ArgumentOutOfRangeException.ThrowIfGreaterThanOrEqual((uint)index, (uint)Count, nameof(index));
        return index;
    }
}
