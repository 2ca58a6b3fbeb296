using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;

namespace IoUring.Net;

// Receiving: one datagram with its source (and local address), or a batch of them.
public sealed partial class IoUringUdpSocket
{
    /// <summary>
    /// Receives one datagram into <paramref name="buffer"/> and its source into <paramref name="remoteAddress"/> (which
    /// you can pass to <see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, CancellationToken)"/> to answer).
    /// </summary>
    /// <param name="buffer">Where the datagram goes; a longer one is cut and reported
    /// (<see cref="DatagramResult.Truncated"/>).</param>
    /// <param name="remoteAddress">Filled with the source address; its buffer must hold this socket's family's
    /// addresses (<see cref="SocketAddress.GetMaximumAddressSize"/>; on a dual-mode socket IPv4 sources come as
    /// IPv4-mapped IPv6).</param>
    /// <param name="cancellationToken">Cancels a wait for a datagram.</param>
    /// <exception cref="SocketException">An error the network reported for an earlier datagram (e.g.
    /// <see cref="SocketError.ConnectionRefused"/>), or <see cref="SocketError.OperationAborted"/>: the socket was
    /// disposed while waiting.</exception>
    /// <exception cref="ObjectDisposedException">The socket is disposed.</exception>
    public ValueTask<DatagramResult> ReceiveFromAsync(Memory<byte> buffer, SocketAddress remoteAddress,
        CancellationToken cancellationToken = default)
    {
        CheckRoom(remoteAddress);
        return _receiver.ReceiveAsync(buffer, remoteAddress, null, cancellationToken);
    }

    /// <summary>
    /// As <see cref="ReceiveFromAsync"/>, and the local address the datagram was sent to into
    /// <paramref name="localAddress"/>: for a socket bound to a wildcard address on a host with several, the address
    /// the peer used, to answer from (<see cref="SendToAsync(ReadOnlyMemory{byte}, SocketAddress, SocketAddress,
    /// CancellationToken)"/>). The interface it came in on is <see cref="DatagramResult.InterfaceIndex"/>.
    /// </summary>
    /// <param name="buffer">Where the datagram goes; a longer one is cut and reported.</param>
    /// <param name="remoteAddress">Filled with the source address, as with <see cref="ReceiveFromAsync"/>.</param>
    /// <param name="localAddress">Filled with the datagram's destination address and the socket's port, of the socket's
    /// family: on a dual-mode socket IPv4 ones come IPv4-mapped; an IPv6 link-local one names its interface in its
    /// scope id. For a broadcast or multicast datagram it is the broadcast or group address: answer those without a
    /// local address.</param>
    /// <param name="cancellationToken">Cancels a wait for a datagram.</param>
    /// <exception cref="InvalidOperationException">The socket does not report local addresses: set
    /// <see cref="IoUringUdpOptions.ReceiveLocalAddress"/>.</exception>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<DatagramResult> ReceiveMessageFromAsync(Memory<byte> buffer, SocketAddress remoteAddress,
        SocketAddress localAddress, CancellationToken cancellationToken = default)
    {
        CheckRoom(remoteAddress);
        CheckRoom(localAddress);
        if (!_receiver.ReportsLocalAddresses)
        {
            throw new InvalidOperationException(
                $"The socket does not report local addresses: set {nameof(IoUringUdpOptions)}." +
                $"{nameof(IoUringUdpOptions.ReceiveLocalAddress)}.");
        }
        return _receiver.ReceiveAsync(buffer, remoteAddress, localAddress, cancellationToken);
    }

    private void CheckRoom(SocketAddress address, [CallerArgumentExpression(nameof(address))] string? name = null)
    {
        ArgumentNullException.ThrowIfNull(address, name);
        if (address.Buffer.Length < _addressSize)
        {
            throw new ArgumentException(
                $"The socket address holds {address.Buffer.Length} bytes; this socket's addresses take " +
                $"{_addressSize}.", name);
        }
    }

    /// <summary>Receives one datagram into <paramref name="buffer"/> (on a connected socket: from its peer).</summary>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<DatagramResult> ReceiveAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
        => _receiver.ReceiveAsync(buffer, null, null, cancellationToken);

    /// <summary>
    /// Waits for at least one datagram, then fills <paramref name="batch"/> with as many as are there (up to its
    /// capacity): those queued, and those arriving until the continuation runs. Returns how many (also
    /// <see cref="UdpDatagramBatch.Count"/>).
    /// </summary>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<int> ReceiveBatchAsync(UdpDatagramBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return _receiver.ReceiveBatchAsync(batch, cancellationToken);
    }
}
