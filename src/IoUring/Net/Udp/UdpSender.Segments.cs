using System.Net;
using System.Net.Sockets;
using IoUring.Interop;

namespace IoUring.Net;

// Segmented sends the kernel refuses to segment: which errors are refusals, and remembering them (loop thread).
internal sealed unsafe partial class UdpSender
{
    /// <summary>A datagram of a send the kernel would not segment went alone: the refusal was the segmenting's, and
    /// later sends skip it. Loop thread.</summary>
    private void RememberRefusal(UdpSendOperation operation)
    {
        int errno = operation.SegmentRefusal;
        if (errno == 0)
        {
            return;
        }
        operation.SegmentRefusal = 0;
        if (errno == Errno.EIO)
        {
            _segmentOffloadRefused = true; // the device's: every destination of the socket, as quinn does
        }
        else if (_refusedSegmentSize == 0 || operation.SegmentSize < _refusedSegmentSize)
        {
            _refusedSegmentSize = operation.SegmentSize; // the route's or the socket's: smaller ones may go
        }
    }

    /// <summary>Whether <paramref name="errno"/> refused the segmenting rather than the datagrams: EMSGSIZE also says
    /// that all of them together are more than one send carries to the destination (65,507 bytes to IPv4), which
    /// stays an error.</summary>
    private bool IsRefusalToSegment(UdpSendOperation operation, int errno)
        => errno is Errno.EIO or Errno.EINVAL
            || (errno == Errno.EMSGSIZE && operation.Length <= LargestSegmentedSend(operation));

    /// <summary>The most bytes one segmented send carries to its destination: 65,535 less the IP and UDP headers
    /// (IPv4's 20, IPv6's 40 of which the payload length does not count).</summary>
    private int LargestSegmentedSend(UdpSendOperation operation)
    {
        Libc.msghdr* message = operation.Message;
        bool ipv4 = message->msg_name is null
            ? _socket.RemoteEndPoint is IPEndPoint { Address: var address }
                && (address.AddressFamily == AddressFamily.InterNetwork || address.IsIPv4MappedToIPv6)
            : *(ushort*)message->msg_name == Libc.AF_INET || IsIPv4Mapped((byte*)message->msg_name);
        return ipv4 ? 65_507 : IoUringUdpOptions.LargestDatagram;
    }

    /// <summary>A sockaddr_in6 holding ::ffff:a.b.c.d (a dual-mode socket's IPv4 destination).</summary>
    private static bool IsIPv4Mapped(byte* name)
        => *(ushort*)name == Libc.AF_INET6 && *(ulong*)(name + 8) == 0 && *(uint*)(name + 16) == 0xFFFF_0000;
}
