using System.Buffers;
using System.Net;
using System.Net.Sockets;

namespace IoUring.Net;

// Sending: one datagram, or many of one size in one segmented send; to an address or the connected peer, from the
// address routing chooses or a chosen local one.
public sealed partial class IoUringUdpSocket
{
    /// <summary>
    /// Sends <paramref name="buffer"/> as one datagram to <paramref name="remoteAddress"/>. The bytes are copied: the
    /// buffer is yours again when this returns, and the send normally completes at once.
    /// </summary>
    /// <returns>The datagram's length.</returns>
    /// <exception cref="SocketException">An error the network reported for an earlier datagram (e.g.
    /// <see cref="SocketError.ConnectionRefused"/>), the kernel's error for this one when the caller waited for it (see
    /// <see cref="IoUringUdpOptions.MaxPendingSends"/>), or <see cref="SocketError.MessageSize"/>: longer than a UDP
    /// datagram can be.</exception>
    /// <exception cref="ObjectDisposedException">The socket is disposed.</exception>
    // RS0026: the SendToAsync overloads differ in the destination's type, as Socket.SendToAsync's do, or add a source
    // address: no call is ambiguous.
#pragma warning disable RS0026
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, SocketAddress remoteAddress,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        return _sender.SendAsync(buffer, remoteAddress, null, cancellationToken);
    }

    /// <summary>
    /// As <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/>, leaving from
    /// <paramref name="localAddress"/> (IP_PKTINFO, IPV6_PKTINFO) rather than the address routing would choose:
    /// answer a datagram from the address it was sent to (<see cref="ReceiveMessageFromAsync"/>).
    /// </summary>
    /// <param name="buffer">The datagram.</param>
    /// <param name="remoteAddress">Where it goes.</param>
    /// <param name="localAddress">The source address: one of this host's, of the socket's family (on a dual-mode socket
    /// an IPv4 one IPv4-mapped); its port is ignored (the socket's is used); an IPv6 one's scope id, if any, is the
    /// interface to leave by. The unspecified address (0.0.0.0, ::) lets routing choose. An address the host does not
    /// have is refused by the kernel (IPv4: <see cref="SocketError.NetworkUnreachable"/>; IPv6:
    /// <see cref="SocketError.InvalidArgument"/>), an error of that send alone: reported to it if it waits, else to
    /// the socket's next send, never to receives.</param>
    /// <param name="cancellationToken">Cancels a send that waits for room.</param>
    /// <exception cref="ArgumentException"><paramref name="localAddress"/> is not of the socket's family.</exception>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, SocketAddress remoteAddress,
        SocketAddress localAddress, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckLocalAddress(localAddress);
        return _sender.SendAsync(buffer, remoteAddress, localAddress, cancellationToken);
    }

    private void CheckLocalAddress(SocketAddress localAddress)
    {
        ArgumentNullException.ThrowIfNull(localAddress);
        AddressFamily family = LocalEndPoint.AddressFamily;
        int size = family == AddressFamily.InterNetworkV6
            ? LocalAddressFormat.IPv6NameSize
            : LocalAddressFormat.IPv4NameSize;
        if (localAddress.Family != family || localAddress.Size < size)
        {
            throw new ArgumentException(
                $"The local address is {localAddress.Family} of {localAddress.Size} bytes; this socket sends from " +
                $"{family} addresses" + (_dualMode ? " (IPv4 ones IPv4-mapped)." : "."), nameof(localAddress));
        }
    }

    /// <summary>As <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/> to an endpoint
    /// (serialized on each call: keep a <see cref="SocketAddress"/> on hot paths).</summary>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, EndPoint remoteEndPoint,
        CancellationToken cancellationToken = default)
#pragma warning restore RS0026
    {
        ArgumentNullException.ThrowIfNull(remoteEndPoint);
        if (_dualMode && remoteEndPoint is IPEndPoint { AddressFamily: AddressFamily.InterNetwork } ipv4)
        {
            // as Socket.SendTo does on a dual-mode socket
            remoteEndPoint = new IPEndPoint(ipv4.Address.MapToIPv6(), ipv4.Port);
        }
        return _sender.SendAsync(buffer, remoteEndPoint.Serialize(), null, cancellationToken);
    }

    /// <summary>Sends <paramref name="buffer"/> as one datagram to the connected peer (see
    /// <see cref="Connect"/>).</summary>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default)
        => _sender.SendAsync(buffer, null, null, cancellationToken);

    /// <summary>The most datagrams one segmented send makes: the kernel's UDP_MAX_SEGMENTS (64; newer kernels take
    /// more, older ones refuse more).</summary>
    public const int MaxSegments = 64;

    /// <summary>
    /// Sends <paramref name="buffer"/> to <paramref name="remoteAddress"/> as datagrams of
    /// <paramref name="segmentSize"/> bytes each, the last one shorter if the length is not a multiple: with one
    /// SENDMSG carrying UDP_SEGMENT, which the kernel (or the network card) cuts into the datagrams (segmentation
    /// offload, GSO).
    /// Each arrives as a datagram of its own. The bytes are copied, as with
    /// <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/>.
    /// </summary>
    /// <remarks>
    /// <para>Where the kernel refuses to segment, the same bytes go one datagram per SENDMSG: the peer receives the
    /// same datagrams either way. <see cref="SegmentOffloads"/> counts the sends the kernel segmented. A refusal is
    /// remembered once a datagram of the send went alone, so that later sends skip the failing SENDMSG: EMSGSIZE (a
    /// segment larger than the route's MTU) and EINVAL (e.g. checksums off) for that segment size and larger ones, to
    /// every destination; EIO (a device that cannot segment) for the whole socket, as quinn does.</para>
    /// <para>Going one by one, each datagram is sent once the previous one's SENDMSG completed; later sends of the
    /// socket are not held back, so their datagrams may arrive in between (UDP keeps no order anyway).</para>
    /// <para>Over IPv4 one segmented send carries at most 65,507 bytes (IPv6: 65,527): more fails with
    /// <see cref="SocketError.MessageSize"/> and nothing is sent.</para>
    /// </remarks>
    /// <returns>The bytes sent: <paramref name="buffer"/>'s length; less when datagrams going one by one failed
    /// partway and the caller waited for the result (see <see cref="IoUringUdpOptions.MaxPendingSends"/>): as with
    /// sendmmsg(2), those before the failed one went, that one and the rest did not.</returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="segmentSize"/> is not 1 to
    /// <see cref="IoUringUdpOptions.LargestDatagram"/>, or the buffer makes more than <see cref="MaxSegments"/>
    /// datagrams.</exception>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    // RS0026: the overloads with a source address or a buffer handed over differ in their parameters' types or number:
    // no call is ambiguous.
#pragma warning disable RS0026
    public ValueTask<int> SendSegmentsToAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        SocketAddress remoteAddress, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, remoteAddress, null, cancellationToken, segmentSize);
    }

    /// <summary>As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>,
    /// leaving from <paramref name="localAddress"/> (see <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress,
    /// SocketAddress, CancellationToken)"/>).</summary>
    /// <exception cref="ArgumentException"><paramref name="localAddress"/> is not of the socket's family.</exception>
    /// <inheritdoc cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"
    ///     path="/exception"/>
    public ValueTask<int> SendSegmentsToAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        SocketAddress remoteAddress, SocketAddress localAddress, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckLocalAddress(localAddress);
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, remoteAddress, localAddress, cancellationToken, segmentSize);
    }

    /// <summary>
    /// As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/> with the first
    /// <paramref name="length"/> bytes of <paramref name="buffer"/>, without copying them: the kernel reads the
    /// datagrams from the buffer's memory. The socket owns <paramref name="buffer"/> from this call on, whatever
    /// happens, and disposes it once the kernel is done with it (the send still completes at once, and the buffer
    /// goes later), also when the send fails or is refused: rent it (from <see cref="MemoryPool{T}.Shared"/>, say),
    /// fill it, hand it over, and do not touch it again.
    /// </summary>
    /// <remarks>The other overloads copy the bytes, up to 64 KiB a send, so that the caller's buffer is free at once;
    /// handing the buffer over saves that copy (docs/benchmarks.md).</remarks>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="length"/> is negative or longer than the
    /// buffer.</exception>
    /// <inheritdoc cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"
    ///     path="/exception"/>
    public ValueTask<int> SendSegmentsToAsync(IMemoryOwner<byte> buffer, int length, int segmentSize,
        SocketAddress remoteAddress, CancellationToken cancellationToken = default)
#pragma warning restore RS0026
    {
        ArgumentNullException.ThrowIfNull(buffer);
        Memory<byte> payload;
        try
        {
            ArgumentNullException.ThrowIfNull(remoteAddress);
            payload = buffer.Memory;
            ArgumentOutOfRangeException.ThrowIfNegative(length);
            ArgumentOutOfRangeException.ThrowIfGreaterThan(length, payload.Length);
            CheckSegments(length, segmentSize);
        }
        catch
        {
            buffer.Dispose(); // it was handed over: the call's failure does not give it back
            throw;
        }
        return _sender.SendAsync(payload[..length], remoteAddress, null, cancellationToken, segmentSize, buffer);
    }

    /// <summary>As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>,
    /// to the connected peer (see <see cref="Connect"/>).</summary>
    /// <inheritdoc cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"
    ///     path="/exception"/>
    public ValueTask<int> SendSegmentsAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        CancellationToken cancellationToken = default)
    {
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, null, null, cancellationToken, segmentSize);
    }

    /// <summary>Segmented sends the kernel took with UDP_SEGMENT: one SENDMSG for all their datagrams (the rest went
    /// one datagram at a time; see
    /// <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>).</summary>
    public long SegmentOffloads => _sender.SegmentOffloads;

    private static void CheckSegments(int length, int segmentSize)
    {
        ArgumentOutOfRangeException.ThrowIfLessThan(segmentSize, 1);
        ArgumentOutOfRangeException.ThrowIfGreaterThan(segmentSize, IoUringUdpOptions.LargestDatagram);
        long segments = ((long)length + segmentSize - 1) / segmentSize; // long: a length near int.MaxValue
        if (segments > MaxSegments)
        {
            throw new ArgumentOutOfRangeException(nameof(segmentSize), segmentSize,
                $"{length} bytes in segments of {segmentSize} make {segments} datagrams; one send makes at most " +
                $"{MaxSegments}.");
        }
    }
}
