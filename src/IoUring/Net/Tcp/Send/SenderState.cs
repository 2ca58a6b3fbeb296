namespace IoUring.Net;

/// <summary>Where a <see cref="ConnectionSender"/>'s send loop is: it moves Idle ⇄ Sending or SendingFile, then to
/// Finished, and from there to Ended when the output ended gracefully (FIN queued).</summary>
internal enum SenderState
{
    /// <summary>No send in flight: waiting for Output's next flush.</summary>
    Idle,
    /// <summary>A send's result CQE has not come.</summary>
    Sending,
    /// <summary>A <see cref="FileSender"/> has the socket until it ends.</summary>
    SendingFile,
    /// <summary>The send loop ended: Output's sender side completed.</summary>
    Finished,
    /// <summary>Finished after all was sent: FIN queued.</summary>
    Ended,
}
