using System.Net;

namespace IoUring.Net;

/// <summary>The arithmetic of a multishot RECVMSG's buffers, and handing a datagram to a caller.</summary>
internal static class Datagrams
{
    /// <summary>sizeof(struct io_uring_recvmsg_out): the header at the start of each buffer.</summary>
    public const int HeaderSize = 16;

    /// <summary>The room for the source address after the header (msg_namelen): sockaddr_in6 is 28 bytes.</summary>
    public const int NameSpace = 32;

    /// <summary>Where the payload starts when no control data is asked for.</summary>
    public const int PayloadOffset = HeaderSize + NameSpace;

    /// <summary>The largest coalesced burst: a GRO packet is at most 64 KiB.</summary>
    public const int LargestCoalesced = 65_535;

    /// <summary>A datagram that does not fit is cut (the result says so). <paramref name="local"/> is left as it is
    /// when the datagram has none.</summary>
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
