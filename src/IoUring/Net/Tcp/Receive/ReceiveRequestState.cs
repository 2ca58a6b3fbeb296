namespace IoUring.Net;

/// <summary>What <see cref="ConnectionReceiver"/> has in flight to receive: at most one of these at a time.</summary>
internal enum ReceiveRequestState : byte
{
    /// <summary>Nothing: a receive may be armed.</summary>
    None,

    /// <summary>The backoff TIMEOUT after a repeated ENOBUFS: a receive is armed again when it ends.</summary>
    BackingOff,

    /// <summary>A RECV (or the vectored RECVMSG), until its final completion.</summary>
    Armed,

    /// <summary>That RECV, and its cancel: one cancel is enough.</summary>
    Cancelling,
}
