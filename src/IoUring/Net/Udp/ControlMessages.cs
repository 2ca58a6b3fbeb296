using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// The control messages (cmsg) of UDP datagrams: those the kernel writes into a receive (UDP_GRO's segment size,
/// IP_PKTINFO's or IPV6_PKTINFO's local address) and those a send carries (UDP_SEGMENT, a chosen source address).
/// </summary>
internal static unsafe class ControlMessages
{
    /// <summary>Room for the UDP_GRO segment size (an int) in a receive.</summary>
    public static readonly int SegmentSizeSpace = Space(sizeof(int));

    /// <summary>Room for UDP_SEGMENT (a u16) in a send.</summary>
    public static readonly int SegmentSpace = Space(sizeof(ushort));

    /// <summary>Room for a local address, received or chosen: the larger of in_pktinfo and in6_pktinfo (a dual-mode
    /// socket gets either).</summary>
    public static readonly int LocalAddressSpace = Space(sizeof(Libc.in6_pktinfo));

    private static int HeaderSize => sizeof(Libc.cmsghdr); // a property: the fields above are computed with it

    /// <summary>CMSG_SPACE: the header, then the data padded to 8 bytes.</summary>
    private static int Space(int dataLength) => HeaderSize + ((dataLength + 7) & ~7);

    /// <summary>
    /// Reads a received datagram's control data: the UDP_GRO segment size (0: not coalesced), and the local address it
    /// was sent to, written into <paramref name="localName"/> as a sockaddr of <paramref name="format"/>'s family
    /// (its length returned; 0 when the kernel reported none).
    /// </summary>
    public static int Read(ReadOnlySpan<byte> control, LocalAddressFormat format, Span<byte> localName,
        out int segmentSize, out int interfaceIndex)
    {
        segmentSize = 0;
        interfaceIndex = 0;
        int localLength = 0;
        while (control.Length >= HeaderSize)
        {
            Libc.cmsghdr cmsg = MemoryMarshal.Read<Libc.cmsghdr>(control);
            if (cmsg.cmsg_len < (nuint)HeaderSize || cmsg.cmsg_len > (nuint)control.Length)
            {
                break; // cut (MSG_CTRUNC) or malformed: nothing after it can be trusted
            }
            ReadOnlySpan<byte> data = control[HeaderSize..(int)cmsg.cmsg_len];
            switch (cmsg.cmsg_level, cmsg.cmsg_type)
            {
                case (Libc.SOL_UDP, Libc.UDP_GRO) when data.Length >= sizeof(int):
                    segmentSize = MemoryMarshal.Read<int>(data);
                    break;
                case (Libc.SOL_IP, Libc.IP_PKTINFO) when data.Length >= sizeof(Libc.in_pktinfo):
                    var v4 = MemoryMarshal.Read<Libc.in_pktinfo>(data);
                    interfaceIndex = v4.ipi_ifindex;
                    // ipi_addr: the header's destination, as Socket.ReceiveMessageFrom reports it
                    localLength = format.WriteIPv4(localName, v4.ipi_addr);
                    break;
                case (Libc.SOL_IPV6, Libc.IPV6_PKTINFO) when data.Length >= sizeof(Libc.in6_pktinfo):
                    var v6 = MemoryMarshal.Read<Libc.in6_pktinfo>(data);
                    interfaceIndex = v6.ipi6_ifindex;
                    localLength = format.WriteIPv6(localName, new ReadOnlySpan<byte>(v6.ipi6_addr, 16),
                        v6.ipi6_ifindex);
                    break;
            }
            int next = ((int)cmsg.cmsg_len + 7) & ~7; // CMSG_ALIGN
            control = next < control.Length ? control[next..] : default;
        }
        return localLength;
    }

    /// <summary>Writes the cmsg that makes a send leave from <paramref name="localName"/>'s address (a sockaddr_in:
    /// IP_PKTINFO; a sockaddr_in6: IPV6_PKTINFO, its scope id the interface); returns the room it took. The
    /// unspecified address with no interface takes none: routing chooses, and a dual-mode socket's "::" towards an
    /// IPv4-mapped peer would be refused (ip_cmsg_send takes only an IPv4-mapped IPV6_PKTINFO there).</summary>
    public static int WriteLocalAddress(byte* at, ReadOnlySpan<byte> localName)
    {
        var cmsg = (Libc.cmsghdr*)at;
        bool ipv4 = MemoryMarshal.Read<ushort>(localName) == Libc.AF_INET;
        ReadOnlySpan<byte> chosen = ipv4 ? localName.Slice(4, 4) : localName[8..28]; // sin6_addr, sin6_scope_id
        if (!chosen.ContainsAnyExcept((byte)0))
        {
            return 0;
        }
        if (ipv4)
        {
            cmsg->cmsg_level = Libc.SOL_IP;
            cmsg->cmsg_type = Libc.IP_PKTINFO;
            cmsg->cmsg_len = (nuint)(HeaderSize + sizeof(Libc.in_pktinfo));
            // ipi_spec_dst is the source; ipi_ifindex 0 lets routing choose the interface
            *(Libc.in_pktinfo*)(cmsg + 1) = new Libc.in_pktinfo
            {
                ipi_spec_dst = MemoryMarshal.Read<uint>(localName[4..]),
            };
            return Space(sizeof(Libc.in_pktinfo));
        }
        cmsg->cmsg_level = Libc.SOL_IPV6;
        cmsg->cmsg_type = Libc.IPV6_PKTINFO;
        cmsg->cmsg_len = (nuint)(HeaderSize + sizeof(Libc.in6_pktinfo));
        var info = (Libc.in6_pktinfo*)(cmsg + 1);
        localName.Slice(8, 16).CopyTo(new Span<byte>(info->ipi6_addr, 16));
        info->ipi6_ifindex = MemoryMarshal.Read<int>(localName[24..]); // sin6_scope_id
        return Space(sizeof(Libc.in6_pktinfo));
    }

    /// <summary>Writes UDP_SEGMENT: the kernel cuts the send into datagrams of <paramref name="segmentSize"/>;
    /// returns the room it took.</summary>
    public static int WriteSegmentSize(byte* at, int segmentSize)
    {
        var cmsg = (Libc.cmsghdr*)at;
        cmsg->cmsg_len = (nuint)(HeaderSize + sizeof(ushort));
        cmsg->cmsg_level = Libc.SOL_UDP;
        cmsg->cmsg_type = Libc.UDP_SEGMENT;
        *(ushort*)(cmsg + 1) = (ushort)segmentSize;
        return SegmentSpace;
    }
}
