using System.Buffers;
using System.Runtime.InteropServices;

namespace IoUring.Net;

/// <summary>One block of the output: bytes [0, Written) written, [0, Committed) of them flushed.</summary>
internal sealed class OutputSegment
{
    private IMemoryOwner<byte>? _owner; // a pool's block
    private byte[]? _array;             // or, for a write larger than any pooled block, an ArrayPool array

    /// <summary>The memory is a caller's (a borrowed write): never written to, given back to no pool.</summary>
    public bool IsBorrowed { get; private set; }

    public Memory<byte> Memory { get; private set; }

    public long RunningIndex { get; private set; }

    /// <summary>Bytes written (by the writer; final once it moved on to the next block).</summary>
    public int Written { get; set; }

    /// <summary>Bytes flushed (set under the lock at each commit).</summary>
    public int Committed { get; set; }

    public OutputSegment? Next { get; set; }

    /// <summary>From <paramref name="pool"/>, else <paramref name="largePool"/>, else an ArrayPool array.</summary>
    public void Rent(MemoryPool<byte> pool, int minimumSize, long runningIndex, MemoryPool<byte>? largePool = null)
    {
        if (minimumSize <= pool.MaxBufferSize)
        {
            _owner = pool.Rent(minimumSize);
            Memory = _owner.Memory;
        }
        else if (largePool is not null && minimumSize <= largePool.MaxBufferSize)
        {
            _owner = largePool.Rent(minimumSize);
            Memory = _owner.Memory;
        }
        else
        {
            _array = ArrayPool<byte>.Shared.Rent(minimumSize);
            Memory = _array;
        }
        RunningIndex = runningIndex;
        Written = 0;
        Committed = 0;
    }

    /// <summary>Holds a caller's bytes, all of them written and committed (its place in the stream set when
    /// linked).</summary>
    public void Borrow(ReadOnlyMemory<byte> source)
    {
        Memory = MemoryMarshal.AsMemory(source); // only ever read: the sender sends from it
        IsBorrowed = true;
        Written = source.Length;
        Committed = source.Length;
    }

    public void SetRunningIndex(long runningIndex) => RunningIndex = runningIndex;

    /// <summary>Gives the block back (a pinned pool block goes back to its pool only once unpinned: zero-copy
    /// sends).</summary>
    public void Release()
    {
        IsBorrowed = false;
        _owner?.Dispose();
        if (_array is not null)
        {
            ArrayPool<byte>.Shared.Return(_array);
        }
        _owner = null;
        _array = null;
        Memory = default;
        Next = null;
    }
}
