using System.Buffers;
using System.Diagnostics;
using IoUring.Buffers;

namespace IoUring.Net;

/// <summary>One block of the sequence a <see cref="ConnectionInput"/> read returns: bytes [0, End) of its
/// <see cref="ReceiveBlock"/>. Reused: released segments wait in the input's spare list.</summary>
internal sealed class InputSegment : ReadOnlySequenceSegment<byte>
{
    public ReceiveBlock Block { get; private set; }

    public int End { get; private set; }

    public void Reset(ReceiveBlock block, long runningIndex)
    {
        Block = block;
        End = 0;
        Memory = default;
        Next = null;
        RunningIndex = runningIndex;
    }

    public void SetEnd(int end)
    {
        Debug.Assert(end >= End, "a segment's bytes shrank");
        End = end;
        Memory = Block.Array.AsMemory(Block.Offset, end);
    }

    public void SetNext(InputSegment? next) => Next = next;
}
