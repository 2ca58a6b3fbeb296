using System.Buffers.Binary;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>Native sockaddr bytes to and from .NET endpoints.</summary>
internal static unsafe class SocketAddresses
{
    public const int MaxSize = 128; // sizeof(struct sockaddr_storage)

    public static EndPoint? GetLocal(int fd) => Get(fd, peer: false);

    public static EndPoint? GetRemote(int fd) => Get(fd, peer: true);

    private static EndPoint? Get(int fd, bool peer)
    {
        byte* buffer = stackalloc byte[MaxSize];
        uint length = MaxSize;
        int result = peer ? Libc.getpeername(fd, buffer, &length) : Libc.getsockname(fd, buffer, &length);
        return result == 0 ? Parse(new ReadOnlySpan<byte>(buffer, (int)length)) : null;
    }

    public static EndPoint? Parse(ReadOnlySpan<byte> address)
    {
        if (address.Length < 2)
        {
            return null;
        }
        int family = MemoryMarshal.Read<ushort>(address);
        switch (family)
        {
            case Libc.AF_INET when address.Length >= 8:
                return new IPEndPoint(new IPAddress(address.Slice(4, 4)), BinaryPrimitives.ReadUInt16BigEndian(address[2..]));
            case Libc.AF_INET6 when address.Length >= 28:
                return new IPEndPoint(new IPAddress(address.Slice(8, 16), MemoryMarshal.Read<uint>(address[24..])), BinaryPrimitives.ReadUInt16BigEndian(address[2..]));
            case Libc.AF_UNIX:
                ReadOnlySpan<byte> path = address[2..];
                int end = path.IndexOf((byte)0);
                path = end >= 0 ? path[..end] : path;
                return path.IsEmpty ? null : new UnixDomainSocketEndPoint(System.Text.Encoding.UTF8.GetString(path));
            default:
                return null;
        }
    }
}
