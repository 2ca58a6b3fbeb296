namespace IoUring.Net;

/// <summary>One datagram as the loop found it in a ring buffer (or a queue slot): its bytes (maybe cut), its length as
/// sent, its source's sockaddr and, when the socket asks for them, the local address it was sent to (a sockaddr of the
/// socket's family) and the interface it came in on.</summary>
internal readonly ref struct ReceivedDatagram(ReadOnlySpan<byte> payload, int length, ReadOnlySpan<byte> source,
    ReadOnlySpan<byte> localName, int interfaceIndex)
{
    public ReadOnlySpan<byte> Payload { get; init; } = payload;

    public int Length { get; init; } = length;

    public ReadOnlySpan<byte> Source { get; } = source;

    public ReadOnlySpan<byte> LocalName { get; } = localName;

    public int InterfaceIndex { get; } = interfaceIndex;
}
