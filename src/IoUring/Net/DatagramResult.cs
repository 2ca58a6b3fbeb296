namespace IoUring.Net;

/// <summary>One datagram received by <see cref="IoUringUdpSocket"/>.</summary>
/// <param name="BytesReceived">The bytes copied into the buffer.</param>
/// <param name="DatagramLength">The datagram's length as sent.</param>
public readonly record struct DatagramResult(int BytesReceived, int DatagramLength)
{
    /// <summary>The datagram was cut (MSG_TRUNC): longer than the buffer or
    /// <see cref="IoUringUdpOptions.MaxDatagramSize"/>.</summary>
    public bool Truncated => BytesReceived < DatagramLength;

    /// <summary>The interface index the datagram came in on when the socket reports local addresses
    /// (<see cref="IoUringUdpOptions.ReceiveLocalAddress"/>); else 0.</summary>
    public int InterfaceIndex { get; init; }
}
