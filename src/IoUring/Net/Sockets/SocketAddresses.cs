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

    /// <summary>An IPv4 or IPv6 peer address is copied unparsed into <paramref name="address"/> (its length returned),
    /// to be parsed only if asked for; any other is parsed into <paramref name="parsed"/> (0 returned). 0 and null
    /// when there is no peer.</summary>
    public static int ReadRemote(int fd, ref InetSocketAddress address, out EndPoint? parsed)
    {
        byte* buffer = stackalloc byte[MaxSize];
        ReadOnlySpan<byte> bytes = Read(fd, peer: true, buffer);
        parsed = null;
        if (bytes.Length < 2)
        {
            return 0;
        }
        int family = MemoryMarshal.Read<ushort>(bytes);
        if (family is Libc.AF_INET or Libc.AF_INET6 && bytes.Length <= InetSocketAddress.Size)
        {
            bytes.CopyTo(address);
            return bytes.Length;
        }
        parsed = Parse(bytes);
        return 0;
    }

    private static EndPoint? Get(int fd, bool peer)
    {
        byte* buffer = stackalloc byte[MaxSize];
        return Parse(Read(fd, peer, buffer)); // empty (no address): null
    }

    /// <summary>Empty on failure.</summary>
    private static ReadOnlySpan<byte> Read(int fd, bool peer, byte* buffer)
    {
        uint length = MaxSize;
        int result = peer ? Libc.getpeername(fd, buffer, &length) : Libc.getsockname(fd, buffer, &length);
        return result == 0 ? new ReadOnlySpan<byte>(buffer, (int)Math.Min(length, MaxSize)) : default;
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
                return new IPEndPoint(new IPAddress(address.Slice(4, 4)),
                    BinaryPrimitives.ReadUInt16BigEndian(address[2..]));
            case Libc.AF_INET6 when address.Length >= 28:
                return new IPEndPoint(new IPAddress(address.Slice(8, 16), MemoryMarshal.Read<uint>(address[24..])),
                    BinaryPrimitives.ReadUInt16BigEndian(address[2..]));
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

/// <summary>An IPv4 or IPv6 sockaddr as the kernel wrote it (see <see cref="SocketAddresses.ReadRemote"/>).</summary>
[System.Runtime.CompilerServices.InlineArray(Size)]
internal struct InetSocketAddress
{
    public const int Size = 28; // sizeof(struct sockaddr_in6), the larger of the two
    private byte _first;
}
