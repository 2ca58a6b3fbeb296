using System.Buffers;
using System.Net;
using System.Net.Sockets;

namespace IoUring.Net;

public sealed partial class IoUringUdpSocket
{
    /// <summary>Sends <paramref name="buffer"/> as one datagram to <paramref name="remoteAddress"/>. The bytes are
    /// copied: the buffer is free when this returns.</summary>
    /// <returns>The datagram's length.</returns>
    /// <exception cref="SocketException">An error reported for an earlier datagram (e.g.
    /// <see cref="SocketError.ConnectionRefused"/>), for this one if the send waited, or
    /// <see cref="SocketError.MessageSize"/>.</exception>
    /// <exception cref="ObjectDisposedException">The socket is disposed.</exception>
    // RS0026: the overloads differ in their parameters' types: no call is ambiguous.
#pragma warning disable RS0026
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, SocketAddress remoteAddress,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        return _sender.SendAsync(buffer, remoteAddress, null, cancellationToken);
    }

    /// <summary>As <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/>, from
    /// <paramref name="localAddress"/> instead of the address routing picks: to answer from the address a datagram was
    /// sent to (<see cref="ReceiveMessageFromAsync"/>).</summary>
    /// <remarks>The local address's port is ignored; 0.0.0.0 or :: lets routing choose. An address the host lacks fails
    /// this send, or the next one if this did not wait.</remarks>
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

    /// <summary>As <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/>, serializing the
    /// endpoint on each call.</summary>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendToAsync(ReadOnlyMemory<byte> buffer, EndPoint remoteEndPoint,
        CancellationToken cancellationToken = default)
#pragma warning restore RS0026
    {
        ArgumentNullException.ThrowIfNull(remoteEndPoint);
        if (_dualMode && remoteEndPoint is IPEndPoint { AddressFamily: AddressFamily.InterNetwork } ipv4)
        {
            remoteEndPoint = new IPEndPoint(ipv4.Address.MapToIPv6(), ipv4.Port);
        }
        return _sender.SendAsync(buffer, remoteEndPoint.Serialize(), null, cancellationToken);
    }

    /// <summary>Sends <paramref name="buffer"/> as one datagram to the peer given to <see cref="Connect"/>.</summary>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    public ValueTask<int> SendAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default)
        => _sender.SendAsync(buffer, null, null, cancellationToken);

    /// <summary>The most datagrams one segmented send makes: UDP_MAX_SEGMENTS as older kernels have it.</summary>
    public const int MaxSegments = 64;

    /// <summary>Sends <paramref name="buffer"/> to <paramref name="remoteAddress"/> as datagrams of
    /// <paramref name="segmentSize"/> bytes (the last may be shorter) in one SENDMSG with UDP_SEGMENT (GSO). The bytes
    /// are copied.</summary>
    /// <remarks>Where the kernel refuses to segment, the datagrams go one SENDMSG each; the peer sees no difference.
    /// More than 65,507 bytes over IPv4 (IPv6: 65,527) fails with <see cref="SocketError.MessageSize"/>.</remarks>
    /// <returns>The bytes sent: fewer than the buffer's length only if a one-by-one send failed partway and the
    /// caller waited.</returns>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="segmentSize"/> is not 1 to
    /// <see cref="IoUringUdpOptions.LargestDatagram"/>, or the buffer makes more than <see cref="MaxSegments"/>
    /// datagrams.</exception>
    /// <inheritdoc cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)" path="/exception"/>
    // RS0026: as for SendToAsync.
#pragma warning disable RS0026
    public ValueTask<int> SendSegmentsToAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        SocketAddress remoteAddress, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(remoteAddress);
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, remoteAddress, null, cancellationToken, segmentSize);
    }

    /// <summary>As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>,
    /// from <paramref name="localAddress"/>.</summary>
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
    /// <paramref name="length"/> bytes of <paramref name="buffer"/>, not copied. The socket owns the buffer from this
    /// call on, even if it throws, and disposes it when the kernel is done: do not touch it again.
    /// </summary>
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
            buffer.Dispose(); // handed over: a failed call does not give it back
            throw;
        }
        return _sender.SendAsync(payload[..length], remoteAddress, null, cancellationToken, segmentSize, buffer);
    }

    /// <summary>As <see cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"/>,
    /// to the peer given to <see cref="Connect"/>.</summary>
    /// <inheritdoc cref="SendSegmentsToAsync(ReadOnlyMemory{byte}, int, SocketAddress, CancellationToken)"
    ///     path="/exception"/>
    public ValueTask<int> SendSegmentsAsync(ReadOnlyMemory<byte> buffer, int segmentSize,
        CancellationToken cancellationToken = default)
    {
        CheckSegments(buffer.Length, segmentSize);
        return _sender.SendAsync(buffer, null, null, cancellationToken, segmentSize);
    }

    /// <summary>Segmented sends the kernel took whole with UDP_SEGMENT.</summary>
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
