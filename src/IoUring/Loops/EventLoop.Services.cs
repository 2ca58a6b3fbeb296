using System.Buffers;
using IoUring.Buffers;
using IoUring.Rings;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Loops;

// The loop's memory pools and file reads on its ring.
public sealed partial class EventLoop
{
    /// <summary>
    /// This loop's pool of pinned memory (blocks of <see cref="EventLoopOptions.MemoryBlockSize"/>), registered with
    /// the ring as fixed buffers where the kernel allows it; connections' pipes use it unless given their own pool
    /// (see <see cref="TryGetRegisteredBuffer"/>). Any thread may rent.
    /// </summary>
    public MemoryPool<byte> MemoryPool => _memory.Pool;

    /// <summary>
    /// This loop's pool of 64 KiB pinned blocks (not registered), for a burst of datagrams handed to
    /// <see cref="Net.IoUringUdpSocket.SendSegmentsToAsync(IMemoryOwner{byte}, int, int, System.Net.SocketAddress,
    /// CancellationToken)"/>, which sends it without a copy and returns the block. Any thread may rent.
    /// </summary>
    public MemoryPool<byte> LargeMemoryPool => _memory.LargePool;

    internal PinnedBlockMemoryPool? MemoryPoolIfCreated => _memory.PoolIfCreated;

    internal const int LargeBlockSize = LoopMemory.LargeBlockSize;

    internal PinnedBlockMemoryPool LargeBlockPool => _memory.LargePool;

    internal RegisteredBufferTable? BufferTable => _memory.Table;

    /// <summary>
    /// Whether <paramref name="memory"/> lies in a block of this loop's <see cref="MemoryPool"/> that is registered
    /// with this loop's ring, and if so the index for <c>sqe-&gt;buf_index</c> (with IORING_RECVSEND_FIXED_BUF, or a
    /// READ_FIXED/WRITE_FIXED opcode; <c>sqe-&gt;addr</c> keeps the memory's address). A region is registered shortly
    /// after its first use, unless the kernel refuses (RLIMIT_MEMLOCK). Keep the block rented until the request's final
    /// completion (a zero-copy send's notification): a trimmed region's index may later name other memory. Loop
    /// thread only.
    /// </summary>
    public bool TryGetRegisteredBuffer(ReadOnlyMemory<byte> memory, out ushort bufferIndex)
    {
        ThrowIfNotOnLoopThread();
        return _memory.TryGetRegisteredIndex(memory, out bufferIndex);
    }

    /// <summary>The block's registered-buffer index in this ring, or -1. Loop thread.</summary>
    internal int RegisteredBufferIndex(PinnedBlock block) => _memory.RegisteredIndex(block);

    private static readonly Action<object?> s_submitFileRead = static s => FileReads.Submit((FileRead)s!);

    private FileReads? _fileReads; // loop thread

    internal FileReadPool FileReadPool => _fileReadPool;

    /// <summary>
    /// Reads up to <paramref name="buffer"/>'s length from <paramref name="file"/> at <paramref name="fileOffset"/>, as
    /// <see cref="RandomAccess.ReadAsync(SafeFileHandle, Memory{byte}, long, CancellationToken)"/> does, submitted on
    /// this loop's ring so no thread waits. Returns the bytes read: fewer at the end of the file, 0 at or past it. Any
    /// thread.
    /// </summary>
    /// <remarks>
    /// <para>The buffer stays pinned and the handle referenced until the kernel's completion, also when cancelled.
    /// Memory of this loop's registered <see cref="MemoryPool"/> is read as a fixed buffer (READ_FIXED).</para>
    /// <para>The continuation runs on the thread pool. A cancelled token cancels a read waiting in the kernel; one
    /// already copying from the page cache completes with its bytes.</para>
    /// <para>The loop's stop cancels reads in flight (<see cref="ObjectDisposedException"/>). A read the kernel cannot
    /// cancel within the stop's deadline (a hung network file system) fails the same way, but its buffer stays pinned
    /// and its file referenced for good, as the kernel may still write: do not reuse that buffer.</para>
    /// </remarks>
    /// <exception cref="ArgumentNullException"><paramref name="file"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="file"/> is invalid.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="fileOffset"/> is negative.</exception>
    /// <exception cref="ObjectDisposedException">The file is closed, or the loop stopped (before or during the
    /// read).</exception>
    /// <exception cref="OperationCanceledException">The token was cancelled before the read took any bytes.</exception>
    /// <exception cref="IOException">The kernel refused the read (the message names the errno: EISDIR for a directory,
    /// EBADF for a handle not open for reading, EINVAL for unaligned O_DIRECT reads, EIO, ...).</exception>
    public ValueTask<int> ReadAsync(SafeFileHandle file, Memory<byte> buffer, long fileOffset,
        CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(file);
        ObjectDisposedException.ThrowIf(file.IsClosed, file);
        if (file.IsInvalid)
        {
            throw new ArgumentException("The file handle is invalid.", nameof(file));
        }
        ArgumentOutOfRangeException.ThrowIfNegative(fileOffset);
        if (cancellationToken.IsCancellationRequested)
        {
            return ValueTask.FromCanceled<int>(cancellationToken);
        }
        if (buffer.IsEmpty)
        {
            return new ValueTask<int>(0);
        }
        ObjectDisposedException.ThrowIf(_stopped.Task.IsCompleted, this);

        FileRead read = _fileReadPool.Rent();
        try
        {
            read.Start(file, buffer, fileOffset, cancellationToken);
        }
        catch
        {
            _fileReadPool.Return(read); // Start takes nothing when it throws
            throw;
        }
        short version = read.Version;
        if (IsOnLoopThread)
        {
            FileReads.Submit(read);
        }
        else
        {
            try
            {
                Post(s_submitFileRead, read);
            }
            catch (ObjectDisposedException ex)
            {
                read.Complete(0, ex);
            }
        }
        return new ValueTask<int>(read, version);
    }

    /// <summary>The loop's file reads in flight, made at the first. Loop thread.</summary>
    internal FileReads FileReadsOnLoop()
    {
        AssertOnLoopThread();
        return _fileReads ??= new FileReads(this);
    }
}
