namespace IoUring.Net;

/// <summary>The operation kinds of a UDP socket's requests (the kind bits of their user_data).</summary>
internal static class UdpRequestKind
{
    public const uint Receive = 1;          // the multishot RECVMSG (UdpReceiver)
    // ASYNC_CANCEL of the RECVMSG, or of an awaited SENDMSG whose caller cancelled
    public const uint Cancel = 2;
    public const uint Send = 3;             // SENDMSG (UdpSender); the user_data tag is the send operation's index
    public const uint ReceiveBackoff = 4;   // TIMEOUT before re-arming a RECVMSG that found no buffer
}
