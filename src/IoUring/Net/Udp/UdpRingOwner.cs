using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// The <see cref="RingOwner"/> of one UDP socket's requests: routes each completion to the receiver or the sender, and
/// lets the socket finish closing after the last one.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class UdpRingOwner(EventLoop loop, IoUringUdpSocket socket) : RingOwner(loop)
{
    internal override void HandleReceive(uint kind, ReceivedBytes data, uint flags)
        => socket.Receiver.OnReceive(data, flags);

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        switch (kind)
        {
            case UdpRequestKind.Receive: socket.Receiver.OnReceiveEnded(result, flags); break;
            case UdpRequestKind.Send: socket.Sender.OnSendCompleted(UserData.Tag(userData), result); break;
            case UdpRequestKind.ReceiveBackoff: socket.Receiver.OnBackoffEnded(); break;
            default: break; // cancel requests: their targets report for themselves
        }
    }

    internal override void OnRequestFinished() => socket.CheckCloseProgress();
}
