namespace IoUring.Net;

/// <summary>
/// Flushed bytes to send, in place in the output's blocks from the head block's <c>headIndex</c> on. Valid until the
/// next <see cref="ConnectionOutput.Consume"/>: all of them were committed, so nothing this reads changes.
/// </summary>
internal readonly struct UnsentBytes(OutputSegment head, int headIndex, long length, bool borrowed)
{
    public long Length => length;

    /// <summary>Some of the bytes are a caller's memory (a borrowed write): never sent zero-copy, as the write
    /// completes at the send's result, before a notification would say the kernel is done with the pages.</summary>
    public bool Borrowed => borrowed;

    public bool IsSingleSegment => head.Committed - headIndex >= length;

    /// <summary>All the bytes, when <see cref="IsSingleSegment"/>.</summary>
    public ReadOnlySpan<byte> SingleSegmentSpan => head.Memory.Span.Slice(headIndex, (int)length);

    public Enumerator GetEnumerator() => new(head, headIndex, length);

    public struct Enumerator(OutputSegment head, int headIndex, long length)
    {
        private OutputSegment? _next = head;
        private int _start = headIndex;
        private long _remaining = length;

        public ReadOnlyMemory<byte> Current { get; private set; }

        public bool MoveNext()
        {
            if (_remaining == 0 || _next is not { } segment)
            {
                return false;
            }
            int count = (int)Math.Min(segment.Committed - _start, _remaining);
            Current = segment.Memory.Slice(_start, count);
            _remaining -= count;
            _start = 0;
            _next = _remaining == 0 ? null : segment.Next; // not past the last: the writer may be linking its next
            return true;
        }
    }
}
