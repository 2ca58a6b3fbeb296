using System.Buffers;
using System.Diagnostics;
using IoUring.Buffers;

namespace IoUring.Net;

// The kept ring buffers: the blocks holding the unconsumed bytes (a ring buffer kept whole, or small receives copied
// onto the last block), and their return to the loop's spares once consumed. Called under _sync.
internal sealed partial class ConnectionInput
{
    private void Append(ReadOnlySpan<byte> bytes, ushort bufferId)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (bytes.Length < _blockSize / 2)
        {
            AppendCopy(bytes);
            return;
        }
        // Worth a block of its own: keep the ring's buffer (the bytes are at its start), a spare takes its place.
        AppendSegment(_buffers.Take(bufferId)).SetEnd(bytes.Length);
        _written += bytes.Length;
    }

    // Copies a small receive onto the end of the last block (a spare block when it has no room).
    private void AppendCopy(ReadOnlySpan<byte> bytes)
    {
        Segment? tail = _tail;
        if (tail is null || _blockSize - tail.End < bytes.Length)
        {
            tail = AppendSegment(_buffers.Spares.Rent());
        }
        bytes.CopyTo(tail.Block.Array.AsSpan(tail.Block.Offset + tail.End));
        tail.SetEnd(tail.End + bytes.Length);
        _written += bytes.Length;
    }

    private Segment AppendSegment(ReceiveBlock block)
    {
        Segment segment = _spareSegments ?? new Segment();
        _spareSegments = (Segment?)segment.Next;
        segment.Reset(block, runningIndex: _written);
        if (_tail is null)
        {
            _head = segment;
            _headIndex = 0;
        }
        else
        {
            _tail.SetNext(segment);
        }
        _tail = segment;
        return segment;
    }

    // Gives back every block whose bytes are all consumed (the last one too: an idle connection holds no memory).
    private void ReleaseConsumed()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        while (_head is { } head && head.RunningIndex + head.End <= _consumed
            && (head != _tail || _consumed == _written))
        {
            _head = (Segment?)head.Next;
            if (head == _tail)
            {
                _tail = null;
            }
            _buffers.Spares.Return(head.Block);
            head.Reset(default, 0);
            head.SetNext(_spareSegments);
            _spareSegments = head;
        }
        _headIndex = _head is null ? 0 : (int)(_consumed - _head.RunningIndex);
    }

    // Once the writer failed, every read throws: the unconsumed bytes can never be returned, so their blocks go back as
    // soon as no result the reader holds shows them (a connection aborted or reset that its application never
    // completes would keep them for good; see InputTests.A_failed_connection_gives_back_the_blocks_...).
    private void DropUnreadable()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        if (_writerError is not null && _readState == ReadState.None && !_lent && _head is not null)
        {
            _consumed = _written;
            ReleaseConsumed();
        }
    }

    /// <summary>One block of the sequence a read returns: bytes [0, End) of its <see cref="ReceiveBlock"/>.</summary>
    private sealed class Segment : ReadOnlySequenceSegment<byte>
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
            Debug.Assert(end >= End);
            End = end;
            Memory = Block.Array.AsMemory(Block.Offset, end);
        }

        public void SetNext(Segment? next) => Next = next;
    }
}
