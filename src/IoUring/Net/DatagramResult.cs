namespace IoUring.Net;

/// <summary>
/// One datagram received by <see cref="IoUringUdpSocket"/>: how many bytes were copied into the caller's buffer, and
/// how long the datagram was. A datagram longer than the buffer (or than
/// <see cref="IoUringUdpOptions.MaxDatagramSize"/>) is cut, as with recvmsg(2)'s MSG_TRUNC, and <see cref="Truncated"/>
/// says so: it is never cut silently.
/// </summary>
/// <param name="BytesReceived">The bytes copied into the buffer.</param>
/// <param name="DatagramLength">The datagram's length as sent.</param>
public readonly record struct DatagramResult(int BytesReceived, int DatagramLength)
{
    /// <summary>The datagram was longer than what was received of it (MSG_TRUNC).</summary>
    public bool Truncated => BytesReceived < DatagramLength;

    /// <summary>The index of the network interface the datagram came in on (as <c>if_nametoindex</c> numbers them),
    /// when the socket reports local addresses (<see cref="IoUringUdpOptions.ReceiveLocalAddress"/>); else 0.</summary>
    public int InterfaceIndex { get; init; }
}
