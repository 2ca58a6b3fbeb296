namespace IoUring.Net;

/// <summary>Where a <see cref="ConnectionSender"/>'s send loop is: it moves Idle ⇄ Sending or SendingFile, then to
/// Finished, and from there to Ended when the output ended gracefully (FIN queued).</summary>
internal enum SenderState
{
    /// <summary>Waiting for Output's next flush.</summary>
    Idle,
    Sending,
    /// <summary>A <see cref="FileSender"/> has the socket until it ends.</summary>
    SendingFile,
    Finished,
    /// <summary>Finished after all was sent: FIN queued.</summary>
    Ended,
}
