using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// UDP control messages (cmsg): UDP_GRO and IP(V6)_PKTINFO on receive; UDP_SEGMENT and a chosen source on send.
/// </summary>
internal static unsafe class ControlMessages
{
    /// <summary>UDP_GRO's segment size, received.</summary>
    public static readonly int SegmentSizeSpace = Space(sizeof(int));

    /// <summary>UDP_SEGMENT, sent.</summary>
    public static readonly int SegmentSpace = Space(sizeof(ushort));

    /// <summary>The larger of in_pktinfo and in6_pktinfo: a dual-mode socket gets either.</summary>
    public static readonly int LocalAddressSpace = Space(sizeof(Libc.in6_pktinfo));

    private static int HeaderSize => sizeof(Libc.cmsghdr); // a property: the fields above are computed with it

    /// <summary>CMSG_SPACE: the header, then the data padded to 8 bytes.</summary>
    private static int Space(int dataLength) => HeaderSize + ((dataLength + 7) & ~7);

    /// <summary>Returns the length of the sockaddr written into <paramref name="localName"/>, 0 when the kernel
    /// reported no local address. <paramref name="segmentSize"/> is 0 when not coalesced.</summary>
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

    /// <summary>Returns the room taken. The unspecified address with no interface takes none: routing chooses, and a
    /// dual-mode socket's "::" towards an IPv4-mapped peer would be refused (ip_cmsg_send takes only an IPv4-mapped
    /// IPV6_PKTINFO there).</summary>
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

    /// <summary>Returns the room taken.</summary>
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
