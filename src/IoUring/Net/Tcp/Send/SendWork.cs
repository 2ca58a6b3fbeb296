namespace IoUring.Net;

/// <summary>What <see cref="ConnectionOutput.TakeWork"/> gives the sender to do.</summary>
internal enum SendWork
{
    /// <summary>Nothing yet: the next flush posts the sender.</summary>
    None,
    Bytes,
    Completed,
    /// <summary>Everything before the queued file is sent: <see cref="ConnectionOutput.QueuedFile"/> goes
    /// now.</summary>
    File,
}
