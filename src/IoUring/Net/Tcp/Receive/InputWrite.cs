namespace IoUring.Net;

/// <summary>What <see cref="ConnectionInput.Write"/> asks of the receiver.</summary>
internal enum InputWrite
{
    Accepted,
    Paused,     // the backlog reached the pause threshold: stop until ConnectionReceiver.OnInputResumed
    ReaderGone, // the reader completed: the bytes were dropped, stop receiving
}
