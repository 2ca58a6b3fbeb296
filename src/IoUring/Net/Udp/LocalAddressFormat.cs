using System.Buffers.Binary;
using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>How a socket names its local addresses: its family and its port.</summary>
internal readonly struct LocalAddressFormat(bool ipv6, int port)
{
    public const int IPv4NameSize = 16; // sizeof(struct sockaddr_in)
    public const int IPv6NameSize = 28; // sizeof(struct sockaddr_in6)

    /// <summary>A send from the unspecified address leaves from the one routing chooses.</summary>
    public int WriteUnspecified(Span<byte> name)
        => ipv6 ? WriteIPv6(name, stackalloc byte[16], interfaceIndex: 0) : WriteIPv4(name, 0);

    public int WriteIPv4(Span<byte> name, uint address)
    {
        name[..IPv4NameSize].Clear();
        MemoryMarshal.Write(name, (ushort)Libc.AF_INET);
        BinaryPrimitives.WriteUInt16BigEndian(name[2..], (ushort)port);
        MemoryMarshal.Write(name[4..], address);
        return IPv4NameSize;
    }

    public int WriteIPv6(Span<byte> name, ReadOnlySpan<byte> address, int interfaceIndex)
    {
        name[..IPv6NameSize].Clear();
        MemoryMarshal.Write(name, (ushort)Libc.AF_INET6);
        BinaryPrimitives.WriteUInt16BigEndian(name[2..], (ushort)port);
        address.CopyTo(name[8..]);
        bool linkLocal = address[0] == 0xfe && (address[1] & 0xc0) == 0x80; // fe80::/10: names its interface
        MemoryMarshal.Write(name[24..], linkLocal ? interfaceIndex : 0);
        return IPv6NameSize;
    }
}
