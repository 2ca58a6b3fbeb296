namespace IoUring.Net;

/// <summary>A <see cref="DatagramQueue"/> slot: a copy of one datagram, its arrays kept between datagrams.</summary>
internal sealed class DatagramSlot
{
    public byte[] Payload = [];
    public int Length;
    public int DatagramLength;
    public readonly byte[] Name = new byte[Datagrams.NameSpace];
    public int NameLength;
    public readonly byte[] LocalName = new byte[LocalAddressFormat.IPv6NameSize];
    public int LocalNameLength;
    public int InterfaceIndex;
}
