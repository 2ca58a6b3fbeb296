namespace IoUring.Net;

/// <summary>What <see cref="ConnectionReceiver"/> has in flight to receive: at most one of these at a time.</summary>
internal enum ReceiveRequestState : byte
{
    None,       // nothing: a receive may be armed
    BackingOff, // the backoff TIMEOUT after a repeated ENOBUFS: a receive is armed again when it ends
    Armed,      // a RECV (or the vectored RECVMSG), until its final completion
    Cancelling, // that RECV, and its cancel: one cancel is enough
}
