using System.Numerics;

namespace IoUring.Net;

/// <summary>Options of one <see cref="IoUringUdpSocket"/> (<see cref="IoUringNetwork.BindUdp"/>).</summary>
public sealed class IoUringUdpOptions
{
    /// <summary>The largest UDP payload: 65,535 bytes less the 8-byte UDP header (IPv6 without jumbograms; IPv4:
    /// 65,507).</summary>
    public const int LargestDatagram = 65_527;

    /// <summary>
    /// The largest datagram received whole. Each of the socket's receive buffers holds one datagram of this size (plus
    /// 48 bytes of header and source address); a longer one is received cut, with
    /// <see cref="DatagramResult.Truncated"/>.
    /// </summary>
    /// <remarks>Defaults to <see cref="LargestDatagram"/>. A protocol with a known limit (DNS: 1,232 or 4,096) saves
    /// memory with it: the socket's receive memory is <see cref="ReceiveBufferCount"/> times this.</remarks>
    public int MaxDatagramSize { get; set; } = LargestDatagram;

    /// <summary>
    /// The number of buffers of the socket's own provided-buffer ring, which its multishot RECVMSG fills. A power of
    /// two. When all are taken before the loop handles them, the kernel's socket buffer holds further datagrams (and
    /// drops them when it is full, as for any UDP socket).
    /// </summary>
    /// <remarks>Defaults to 32.</remarks>
    public int ReceiveBufferCount { get; set; } = 32;

    /// <summary>
    /// Datagrams kept (copied) while no receive waits for them. When the queue is full the socket stops taking
    /// datagrams from the kernel (its socket buffer holds them, and drops new ones when full) until receives have taken
    /// half of the queue; the few already on their way then are dropped and counted in
    /// <see cref="IoUringUdpSocket.DatagramsDropped"/>.
    /// </summary>
    /// <remarks>Defaults to 256.</remarks>
    public int ReceiveQueueCapacity { get; set; } = 256;

    /// <summary>
    /// Datagrams that may be in the kernel's hands while their callers went on: a send copies the datagram and
    /// completes at once, and an error the kernel reports for it surfaces on the socket's next operation (as ICMP
    /// errors do). Past this many, a send completes only when the kernel is done with it. A segmented send counts its
    /// datagrams.
    /// </summary>
    /// <remarks>Defaults to 1,024.</remarks>
    public int MaxPendingSends { get; set; } = 1024;

    /// <summary>
    /// Ask the kernel for coalesced receives (UDP_GRO): a burst of equal-size datagrams from one source (a peer's
    /// segmented send, or a network card's receive offload) arrives in one buffer, which the socket splits back into
    /// the datagrams, each with its source address, so receives and batches see exactly what was sent.
    /// </summary>
    /// <remarks>Defaults to false. When true, each receive buffer holds a whole coalesced burst (64 KiB) whatever
    /// <see cref="MaxDatagramSize"/> says; datagrams longer than <see cref="MaxDatagramSize"/> are still cut and
    /// reported.</remarks>
    public bool ReceiveCoalesced { get; set; }

    /// <summary>
    /// Ask the kernel for each datagram's local address (IP_PKTINFO, IPV6_RECVPKTINFO) and interface: a socket bound to
    /// a wildcard address on a multi-homed host answers from the address the peer used
    /// (<see cref="IoUringUdpSocket.ReceiveMessageFromAsync"/>, <see cref="UdpDatagramBatch.GetLocalAddress"/>, then
    /// <see cref="IoUringUdpSocket.SendToAsync(ReadOnlyMemory{byte}, System.Net.SocketAddress,
    /// System.Net.SocketAddress, CancellationToken)"/>).
    /// </summary>
    /// <remarks>Defaults to false. Each receive buffer then takes 40 bytes more, for the control data. Sending from a
    /// chosen local address needs no option.</remarks>
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
