namespace IoUring.Net;

// TryTake's answer (nested: the sender names it ConnectionOutput.OutputTake).
internal sealed partial class ConnectionOutput
{
    /// <summary>What <see cref="TryTake"/> gives the sender.</summary>
    public enum OutputTake
    {
        Waiting,
        Bytes,
        Completed,
        /// <summary>Everything before the queued file is sent: <see cref="QueuedFile"/> goes now.</summary>
        File,
    }
}
