using System.Numerics;

namespace IoUring.Net;

/// <summary>Options of one <see cref="IoUringUdpSocket"/> (<see cref="IoUringNetwork.BindUdp"/>).</summary>
public sealed class IoUringUdpOptions
{
    /// <summary>The largest UDP payload over IPv6 without jumbograms (IPv4: 65,507).</summary>
    public const int LargestDatagram = 65_527;

    /// <summary>The largest datagram received whole; longer ones are cut.</summary>
    /// <remarks>Defaults to <see cref="LargestDatagram"/>. Receive memory is <see cref="ReceiveBufferCount"/> times
    /// this.</remarks>
    public int MaxDatagramSize { get; set; } = LargestDatagram;

    /// <summary>Buffers in the socket's receive ring, a power of two.</summary>
    /// <remarks>Defaults to 32.</remarks>
    public int ReceiveBufferCount { get; set; } = 32;

    /// <summary>Datagrams kept while no receive waits. When full, the socket stops taking datagrams from the kernel
    /// until receives take half; the few already on their way are dropped
    /// (<see cref="IoUringUdpSocket.DatagramsDropped"/>).</summary>
    /// <remarks>Defaults to 256.</remarks>
    public int ReceiveQueueCapacity { get; set; } = 256;

    /// <summary>Datagrams that may be in the kernel's hands after their sends completed; an error for one surfaces on
    /// the socket's next operation. Past this many, a send waits for the kernel. A segmented send counts its
    /// datagrams.</summary>
    /// <remarks>Defaults to 1,024.</remarks>
    public int MaxPendingSends { get; set; } = 1024;

    /// <summary>Ask for coalesced receives (UDP_GRO), which the socket splits back into the datagrams sent.</summary>
    /// <remarks>Defaults to false. Each receive buffer then holds 64 KiB; datagrams longer than
    /// <see cref="MaxDatagramSize"/> are still cut.</remarks>
    public bool ReceiveCoalesced { get; set; }

    /// <summary>Ask for each datagram's local address and interface (IP_PKTINFO), so a socket bound to a wildcard
    /// address can answer from the address the peer used (<see cref="IoUringUdpSocket.ReceiveMessageFromAsync"/>,
    /// <see cref="UdpDatagramBatch.GetLocalAddress"/>).</summary>
    /// <remarks>Defaults to false. Sending from a chosen address needs no option.</remarks>
    public bool ReceiveLocalAddress { get; set; }

    internal void Validate()
    {
        if (MaxDatagramSize is < 1 or > LargestDatagram)
        {
            throw new ArgumentException(
                $"{nameof(MaxDatagramSize)} must be between 1 and {LargestDatagram} (was {MaxDatagramSize}).",
                nameof(MaxDatagramSize));
        }
        if (ReceiveBufferCount is < 1 or > 32768 || !BitOperations.IsPow2(ReceiveBufferCount))
        {
            throw new ArgumentException(
                $"{nameof(ReceiveBufferCount)} must be a power of two between 1 and 32768 " +
                $"(was {ReceiveBufferCount}).", nameof(ReceiveBufferCount));
        }
        if (ReceiveQueueCapacity < 1)
        {
            throw new ArgumentException(
                $"{nameof(ReceiveQueueCapacity)} must be at least 1 (was {ReceiveQueueCapacity}).",
                nameof(ReceiveQueueCapacity));
        }
        if (MaxPendingSends is < 0 or > 60_000)
        {
            throw new ArgumentException(
                $"{nameof(MaxPendingSends)} must be between 0 and 60,000 (was {MaxPendingSends}).",
                nameof(MaxPendingSends));
        }
    }
}
