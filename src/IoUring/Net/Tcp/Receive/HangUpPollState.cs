namespace IoUring.Net;

/// <summary><see cref="ConnectionReceiver"/>'s one-shot hang-up poll, armed once at the start.</summary>
internal enum HangUpPollState : byte
{
    None,       // not armed yet, or cancelled at close
    Armed,      // the POLL_ADD is in flight
    PeerHungUp, // it fired: the peer's FIN or reset (or an error) reached the socket
}
