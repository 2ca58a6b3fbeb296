using System.Net;
using System.Net.Sockets;
using System.Runtime.CompilerServices;

namespace IoUring.Net;

public sealed partial class IoUringUdpSocket
{
    /// <summary>Receives one datagram into <paramref name="buffer"/>, cut if longer
    /// (<see cref="DatagramResult.Truncated"/>), and its source into <paramref name="remoteAddress"/>, which must have
    /// room for this socket's family (IPv4-mapped on a dual-mode socket).</summary>
    /// <exception cref="SocketException">An error reported for an earlier datagram (e.g.
    /// <see cref="SocketError.ConnectionRefused"/>), or <see cref="SocketError.OperationAborted"/>: the socket was
    /// disposed while waiting.</exception>
    /// <exception cref="ObjectDisposedException">The socket is disposed.</exception>
    public ValueTask<DatagramResult> ReceiveFromAsync(Memory<byte> buffer, SocketAddress remoteAddress,
        CancellationToken cancellationToken = default)
    {
        CheckRoom(remoteAddress);
        return _receiver.ReceiveAsync(buffer, remoteAddress, null, cancellationToken);
    }

    /// <summary>As <see cref="ReceiveFromAsync"/>, also filling <paramref name="localAddress"/> with the address the
    /// datagram was sent to and the socket's port, to answer from it (<see cref="SendToAsync(ReadOnlyMemory{byte},
    /// SocketAddress, SocketAddress, CancellationToken)"/>).</summary>
    /// <remarks>For broadcast or multicast that is the broadcast or group address: answer those without a local
    /// address.</remarks>
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

    /// <summary>Waits for at least one datagram, then fills <paramref name="batch"/> with as many as have arrived, up
    /// to its capacity. Returns how many (<see cref="UdpDatagramBatch.Count"/>).</summary>
    /// <inheritdoc cref="ReceiveFromAsync" path="/exception"/>
    public ValueTask<int> ReceiveBatchAsync(UdpDatagramBatch batch, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(batch);
        return _receiver.ReceiveBatchAsync(batch, cancellationToken);
    }
}
