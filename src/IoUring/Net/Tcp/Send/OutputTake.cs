namespace IoUring.Net;

/// <summary>What <see cref="ConnectionOutput.TryTake"/> gives the sender.</summary>
internal enum OutputTake
{
    Waiting,
    Bytes,
    Completed,
    /// <summary>Everything before the queued file is sent: <see cref="ConnectionOutput.QueuedFile"/> goes
    /// now.</summary>
    File,
}
