namespace IoUring.Net;

/// <summary><see cref="ConnectionReceiver"/>'s one-shot hang-up poll: armed once at the start.</summary>
internal enum HangUpPollState : byte
{
    /// <summary>Not armed yet, or cancelled at close.</summary>
    None,

    /// <summary>The POLL_ADD is in flight.</summary>
    Armed,

    /// <summary>It fired: the peer's FIN or reset (or an error) reached the socket.</summary>
    PeerHungUp,
}
