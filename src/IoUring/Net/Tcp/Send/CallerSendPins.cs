using System.Buffers;

namespace IoUring.Net;

/// <summary>The pins of one sendmsg(2) from a flushing thread (<see cref="ConnectionOutput"/>'s caller sends), on its
/// stack.</summary>
[System.Runtime.CompilerServices.InlineArray(ConnectionOutput.MaxCallerSendSegments)]
internal struct CallerSendPins
{
    private MemoryHandle _first;
}
