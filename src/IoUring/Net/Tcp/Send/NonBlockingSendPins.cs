using System.Buffers;

namespace IoUring.Net;

/// <summary>The pins of one <see cref="NonBlockingSend"/> sendmsg(2), on its stack.</summary>
[System.Runtime.CompilerServices.InlineArray(ConnectionOutput.MaxCallerSendSegments)]
internal struct NonBlockingSendPins
{
    private MemoryHandle _first;
}
