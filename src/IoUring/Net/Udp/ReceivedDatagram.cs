namespace IoUring.Net;

/// <summary>One datagram in a ring buffer or a queue slot: its bytes (maybe cut), its length as sent, and the
/// sockaddrs of its source and, if asked for, its local address.</summary>
internal readonly ref struct ReceivedDatagram(ReadOnlySpan<byte> payload, int length, ReadOnlySpan<byte> source,
    ReadOnlySpan<byte> localName, int interfaceIndex)
{
    public ReadOnlySpan<byte> Payload { get; init; } = payload;

    public int Length { get; init; } = length;

    public ReadOnlySpan<byte> Source { get; } = source;

    public ReadOnlySpan<byte> LocalName { get; } = localName;

    public int InterfaceIndex { get; } = interfaceIndex;
}
