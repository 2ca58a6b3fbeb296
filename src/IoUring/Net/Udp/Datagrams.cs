using System.Net;

namespace IoUring.Net;

/// <summary>The arithmetic of a multishot RECVMSG's buffers, and handing a datagram to a caller.</summary>
internal static class Datagrams
{
    /// <summary>sizeof(struct io_uring_recvmsg_out): the header at the start of each buffer.</summary>
    public const int HeaderSize = 16;

    /// <summary>The room the kernel reserves for the source address after the header (msghdr.msg_namelen): sockaddr_in6
    /// is 28 bytes.</summary>
    public const int NameSpace = 32;

    /// <summary>Where the payload starts in a buffer when no control data is asked for (msg_controllen 0).</summary>
    public const int PayloadOffset = HeaderSize + NameSpace;

    /// <summary>The largest coalesced burst: a GRO packet is at most 64 KiB.</summary>
    public const int LargestCoalesced = 65_535;

    /// <summary>Copies a datagram into a caller's buffer (cut if it does not fit: the result says so), its source
    /// into <paramref name="from"/> and its local address into <paramref name="local"/> (left as it is when the
    /// datagram has none: the socket does not ask for them).</summary>
    public static DatagramResult CopyOut(in ReceivedDatagram datagram, Span<byte> target, SocketAddress? from,
        SocketAddress? local)
    {
        int count = Math.Min(datagram.Payload.Length, target.Length);
        datagram.Payload[..count].CopyTo(target);
        if (from is not null)
        {
            datagram.Source.CopyTo(from.Buffer.Span);
            from.Size = datagram.Source.Length;
        }
        if (local is not null && datagram.LocalName.Length > 0)
        {
            datagram.LocalName.CopyTo(local.Buffer.Span);
            local.Size = datagram.LocalName.Length;
        }
        return new DatagramResult(count, datagram.Length) { InterfaceIndex = datagram.InterfaceIndex };
    }
}
