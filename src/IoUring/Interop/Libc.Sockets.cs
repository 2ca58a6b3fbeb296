using System.Runtime.InteropServices;

namespace IoUring.Interop;

#pragma warning disable CS8981, IDE1006 // kernel names

/// <summary>The socket calls made outside the ring: creating, configuring and naming sockets.</summary>
internal static unsafe partial class Libc
{
    public const int AF_INET = 2;
    public const int AF_INET6 = 10;
    public const int SOL_SOCKET = 1;
    public const int SO_LINGER = 13;
    public const int IPPROTO_TCP = 6;
    public const int TCP_NODELAY = 1;
    public const uint MSG_NOSIGNAL = 0x4000;
    public const uint MSG_TRUNC = 0x20;
    public const int MSG_DONTWAIT = 0x40;
    public const int SHUT_WR = 1;
    public const int SOL_UDP = 17;
    public const int UDP_SEGMENT = 103; // a send's segment size (GSO): a u16 cmsg at level SOL_UDP
    public const int UDP_GRO = 104;     // socket option: coalesced receives; each reports its segment size (int cmsg)
    public const int SOL_IP = 0;
    public const int IP_PKTINFO = 8;        // option: report datagrams' local addresses; cmsg: choose a send's source
    public const int SOL_IPV6 = 41;
    public const int IPV6_RECVPKTINFO = 49; // option: report each datagram's local address (an IPV6_PKTINFO cmsg)
    public const int IPV6_PKTINFO = 50;     // cmsg: a datagram's local address and interface

    [StructLayout(LayoutKind.Sequential)]
    public struct linger
    {
        public int l_onoff;
        public int l_linger;
    }

    /// <summary>struct msghdr (56 bytes on 64-bit Linux).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct msghdr
    {
        public void* msg_name;
        public uint msg_namelen;
        public iovec* msg_iov;
        public nuint msg_iovlen;
        public void* msg_control;
        public nuint msg_controllen;
        public int msg_flags;
    }

    /// <summary>struct cmsghdr (16 bytes on 64-bit Linux); its data follows, aligned to 8 bytes.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct cmsghdr
    {
        public nuint cmsg_len;
        public int cmsg_level;
        public int cmsg_type;
    }

    /// <summary>struct in_pktinfo: an IPv4 datagram's interface and addresses (IP_PKTINFO).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct in_pktinfo
    {
        public int ipi_ifindex;
        public uint ipi_spec_dst; // sending: the source address; received: the local address routing chose
        public uint ipi_addr;     // received: the header's destination address
    }

    /// <summary>struct in6_pktinfo: an IPv6 datagram's local address and interface (IPV6_PKTINFO).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct in6_pktinfo
    {
        public fixed byte ipi6_addr[16];
        public int ipi6_ifindex;
    }

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int socket(int domain, int type, int protocol);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int shutdown(int fd, int how);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial nint send(int fd, void* buffer, nuint length, int flags);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial nint sendmsg(int fd, msghdr* message, int flags);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int setsockopt(int fd, int level, int name, void* value, uint length);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int getsockname(int fd, byte* address, uint* length);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int getpeername(int fd, byte* address, uint* length);

    public static int SetIntOption(int fd, int level, int name, int value)
        => setsockopt(fd, level, name, &value, sizeof(int));
}
