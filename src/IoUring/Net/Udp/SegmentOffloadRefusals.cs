using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.Versioning;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// What a <see cref="UdpSender"/> learned from the kernel's refusals to segment: EIO (the device cannot) for every
/// destination, as quinn does; EMSGSIZE (above the route's MTU) or EINVAL (checksums off, say) for that segment size
/// and larger. A refusal counts only once a datagram of the send went alone: datagrams that fail alone too say nothing
/// about segmenting.
/// </summary>
/// <remarks>A mutable struct: a field of its sender, never copied. Written on the loop thread, read by any.</remarks>
[SupportedOSPlatform("linux")]
internal unsafe struct SegmentOffloadRefusals
{
    private volatile bool _refusedByDevice;
    private volatile int _refusedSegmentSize; // the smallest refused, 0 for none

    public readonly bool MayOffload(int segmentSize)
    {
        int refusedSize = _refusedSegmentSize;
        return !_refusedByDevice && (refusedSize == 0 || segmentSize < refusedSize);
    }

    /// <summary>A datagram of the send went alone: a refusal it met was the segmenting's.</summary>
    public void Remember(UdpSendOperation operation)
    {
        int errno = operation.SegmentRefusal;
        if (errno == 0)
        {
            return;
        }
        operation.SegmentRefusal = 0;
        if (errno == Errno.EIO)
        {
            _refusedByDevice = true;
        }
        else if (_refusedSegmentSize == 0 || operation.SegmentSize < _refusedSegmentSize)
        {
            Debug.Assert(errno is Errno.EMSGSIZE or Errno.EINVAL, "only EIO, EMSGSIZE and EINVAL refuse segmenting");
            _refusedSegmentSize = operation.SegmentSize; // the route's or the socket's: smaller ones may go
        }
    }

    /// <summary>EMSGSIZE also says that the datagrams together are more than one send carries, which stays an
    /// error.</summary>
    public static bool IsRefusalToSegment(UdpSendOperation operation, int errno, IoUringUdpSocket socket)
        => errno is Errno.EIO or Errno.EINVAL
            || (errno == Errno.EMSGSIZE && operation.Length <= LargestSegmentedSend(operation, socket));

    /// <summary>65,535 less the IP and UDP headers (IPv6's 40 do not count in its payload length).</summary>
    private static int LargestSegmentedSend(UdpSendOperation operation, IoUringUdpSocket socket)
    {
        Libc.msghdr* message = operation.Message;
        bool ipv4 = message->msg_name is null
            ? socket.RemoteEndPoint is IPEndPoint { Address: var address }
                && (address.AddressFamily == AddressFamily.InterNetwork || address.IsIPv4MappedToIPv6)
            : *(ushort*)message->msg_name == Libc.AF_INET || IsIPv4Mapped((byte*)message->msg_name);
        return ipv4 ? 65_507 : IoUringUdpOptions.LargestDatagram;
    }

    /// <summary>A sockaddr_in6 holding ::ffff:a.b.c.d (a dual-mode socket's IPv4 destination).</summary>
    private static bool IsIPv4Mapped(byte* name)
        => *(ushort*)name == Libc.AF_INET6 && *(ulong*)(name + 8) == 0 && *(uint*)(name + 16) == 0xFFFF_0000;
}
