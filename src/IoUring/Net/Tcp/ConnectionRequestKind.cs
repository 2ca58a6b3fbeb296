namespace IoUring.Net;

/// <summary>The operation kinds of a connection's requests (the kind bits of their user_data).</summary>
internal static class ConnectionRequestKind
{
    // the RECV (ConnectionReceiver): multishot, or single-shot without the kernel's cap
    public const uint Receive = 1;
    public const uint Cancel = 2;           // ASYNC_CANCEL of one of the connection's requests, by its user_data
    public const uint Send = 3;             // SEND/SENDMSG (ConnectionSender)
    public const uint ReceiveBackoff = 4;   // TIMEOUT before re-arming a receive that found no buffer
    public const uint HangUpPoll = 5;       // one-shot POLL_ADD for the peer's FIN or reset
    public const uint Close = 6;            // CLOSE of the fd, after every other request on it ended
    public const uint SendZeroCopy = 7;     // SEND_ZC/SENDMSG_ZC; the user_data tag is the pin set
    // A file send's requests (FileSender) are the Send kind with a tag other than 0: the kind bits are all taken.

    /// <summary>The user_data tag of a Receive that is a vectored RECVMSG into the receiver's own blocks.</summary>
    public const uint VectoredTag = 1;
}
