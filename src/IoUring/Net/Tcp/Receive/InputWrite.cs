namespace IoUring.Net;

/// <summary>What <see cref="ConnectionInput.Write"/> asks of the receiver.</summary>
internal enum InputWrite
{
    /// <summary>Go on receiving.</summary>
    Accepted,

    /// <summary>The backlog reached the pause threshold: stop receiving until
    /// <see cref="ConnectionReceiver.OnInputResumed"/>.</summary>
    Paused,

    /// <summary>The reader completed: the bytes were dropped, stop receiving.</summary>
    ReaderGone,
}
