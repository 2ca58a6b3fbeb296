using System.Diagnostics;
using IoUring.Buffers;
using IoUring.Loops;

namespace IoUring.Net;

// Writer side: the loop thread. The receiver's calls: a completion's bytes appended, a waiting read woken, the end of
// the stream; and what a write asks of the receiver (pause, or stop: the reader is gone).
internal sealed partial class ConnectionInput
{
    /// <summary>
    /// Appends a completion's bytes, keeping the ring buffers filled at least half (see the class summary), and
    /// completes a waiting read that can now complete. <see cref="InputWrite.Paused"/>: the backlog reached the pause
    /// threshold, stop receiving until <see cref="ConnectionReceiver.OnInputResumed"/>.
    /// <see cref="InputWrite.ReaderGone"/>: the reader completed, the bytes are dropped (as a pipe's flush reports it:
    /// a reader completing while receiving goes on is noticed here, at the next receive; one completing while paused is
    /// posted). <paramref name="moreFollows"/>: the receiver's next completion brings more bytes at once (the socket
    /// still holds some and the next RECV is being armed), so a waiting read is left waiting for it until
    /// <see cref="MaxHeldForMore"/> bytes are unconsumed: the reader wakes once per batch, not once per ring buffer.
    /// The receiver calls <see cref="WakeReader"/> when no such completion follows after all.
    /// </summary>
    public InputWrite Write(ReceivedBytes data, bool moreFollows = false)
    {
        AwaiterCompletion completion = default;
        bool paused;
        lock (_sync)
        {
            if (_readerCompleted || _writerCompleted)
            {
                return _readerCompleted ? InputWrite.ReaderGone : InputWrite.Accepted;
            }
            ReceivedBytes.Enumerator buffers = data.GetEnumerator();
            while (buffers.MoveNext())
            {
                Append(buffers.Current, buffers.CurrentBufferId);
            }
            paused = AfterAppend(moreFollows, ref completion);
        }
        completion.Run();
        return paused ? InputWrite.Paused : InputWrite.Accepted; // a reader that clears it later posts OnInputResumed
    }

    /// <summary>
    /// As <see cref="Write"/>, for a receive into the receiver's own spare blocks (a vectored RECVMSG): the first
    /// <paramref name="length"/> bytes of <paramref name="blocks"/>, filled in order, each up to
    /// <paramref name="lengths"/>. Input takes the blocks it keeps; the rest go back to the spares, whatever the
    /// outcome.
    /// </summary>
    public InputWrite WriteBlocks(ReadOnlySpan<ReceiveBlock> blocks, ReadOnlySpan<int> lengths, int length,
        bool moreFollows)
    {
        AwaiterCompletion completion = default;
        bool paused;
        lock (_sync)
        {
            if (_readerCompleted || _writerCompleted)
            {
                length = 0; // dropped, as Write drops them
            }
            int i = 0;
            try
            {
                for (; i < blocks.Length; i++)
                {
                    int filled = Math.Min(lengths[i], length);
                    length -= filled;
                    if (filled >= _blockSize / 2)
                    {
                        AppendSegment(blocks[i]).SetEnd(filled);
                        _written += filled;
                    }
                    else
                    {
                        if (filled > 0)
                        {
                            AppendCopy(blocks[i].Array.AsSpan(blocks[i].Offset, filled)); // may fail to rent a block
                        }
                        _buffers.Spares.Return(blocks[i]);
                    }
                }
            }
            finally
            {
                for (; i < blocks.Length; i++)
                {
                    _buffers.Spares.Return(blocks[i]); // the failed one and the rest: never leaked
                }
            }
            if (_readerCompleted || _writerCompleted)
            {
                return _readerCompleted ? InputWrite.ReaderGone : InputWrite.Accepted;
            }
            paused = AfterAppend(moreFollows, ref completion);
        }
        completion.Run();
        return paused ? InputWrite.Paused : InputWrite.Accepted;
    }

    // Under the lock, after bytes were appended: pauses at the threshold, and completes a waiting read that can
    // complete (unless more follows at once; see Write). Returns whether the writer is paused.
    private bool AfterAppend(bool moreFollows, ref AwaiterCompletion completion)
    {
        Debug.Assert(Monitor.IsEntered(_sync), "called without the lock");
        long backlog = _written - _consumed;
        if (_pauseThreshold > 0 && backlog >= _pauseThreshold && backlog >= _pendingMinimum)
        {
            _writerPaused = true;
        }
        if (_read.IsWaiting && CanCompleteRead(_pendingMinimum)
            && !(moreFollows && !_writerPaused && backlog < MaxHeldForMore))
        {
            completion = CompletePendingRead(canceled: false, error: null);
        }
        return _writerPaused;
    }

    /// <summary>Completes a waiting read that <see cref="Write"/> left waiting for more (see there), if it can
    /// complete.</summary>
    public void WakeReader()
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            if (_read.IsWaiting && CanCompleteRead(_pendingMinimum))
            {
                completion = CompletePendingRead(canceled: false, error: null);
            }
        }
        completion.Run();
    }

    /// <summary>
    /// No more bytes: the peer's FIN (<paramref name="error"/> null) or a failure every read throws from now on. The
    /// first completion stands (as a pipe's): an abort after the peer's FIN leaves the bytes before it readable.
    /// </summary>
    public void CompleteWriter(Exception? error)
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            if (_writerCompleted)
            {
                return;
            }
            _writerCompleted = true;
            _writerError = error;
            if (_read.IsWaiting)
            {
                completion = CompletePendingRead(canceled: false, error);
            }
            DropUnreadable();
        }
        completion.Run();
    }
}
