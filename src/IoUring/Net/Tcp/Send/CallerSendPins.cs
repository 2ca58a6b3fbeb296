using System.Buffers;

namespace IoUring.Net;

// The pins of a sendmsg(2) from the caller's thread (SendGather).
internal sealed partial class ConnectionOutput
{
    [System.Runtime.CompilerServices.InlineArray(MaxCallerSendSegments)]
    private struct PinnedSegments
    {
        private MemoryHandle _first;
    }
}
