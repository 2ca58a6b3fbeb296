using System.Buffers;
using IoUring.Buffers;
using IoUring.Rings;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Loops;

// What the loop offers callers besides Schedule: its memory pools (pinned, registered with its ring) and file reads
// on its ring (RandomAccess.ReadAsync's contract, the read submitted by the loop instead of a blocking pread).
public sealed partial class EventLoop
{
    /// <summary>
    /// This loop's pool of pinned memory (blocks of <see cref="EventLoopOptions.MemoryBlockSize"/>), registered with
    /// the loop's ring as fixed buffers where the kernel allows it. Connections on this loop use it for their pipes
    /// unless given a pool of their own; custom requests can name its blocks as fixed buffers (see
    /// <see cref="TryGetRegisteredBuffer"/>). Any thread may rent.
    /// </summary>
    public MemoryPool<byte> MemoryPool => _memory.Pool;

    /// <summary>
    /// This loop's pool of 64 KiB pinned blocks, trimmed when idle (not registered with the ring): rent a whole burst
    /// of datagrams from it, fill it and hand it over to <see cref="Net.IoUringUdpSocket.SendSegmentsToAsync(
    /// IMemoryOwner{byte}, int, int, System.Net.SocketAddress, CancellationToken)"/>, which sends it without a copy and
    /// returns the block when the kernel is done. Any thread may rent.
    /// </summary>
    public MemoryPool<byte> LargeMemoryPool => _memory.LargePool;

    internal PinnedBlockMemoryPool? MemoryPoolIfCreated => _memory.PoolIfCreated;

    internal const int LargeBlockSize = LoopMemory.LargeBlockSize;

    internal PinnedBlockMemoryPool LargeBlockPool => _memory.LargePool;

    internal RegisteredBufferTable? BufferTable => _memory.Table;

    /// <summary>
    /// Whether <paramref name="memory"/> lies in a block of this loop's <see cref="MemoryPool"/> that is registered
    /// with this loop's ring, and if so the buffer's index: a request sets it in <c>sqe-&gt;buf_index</c> with
    /// IORING_RECVSEND_FIXED_BUF (sends) or uses a READ_FIXED/WRITE_FIXED opcode, and keeps the memory's own address in
    /// <c>sqe-&gt;addr</c>. Registration happens on the loop thread shortly after a region is first used, and is
    /// refused where the kernel says no (RLIMIT_MEMLOCK): the memory is then still usable, only not fixed.
    /// Keep the block rented until the request's final completion (for a zero-copy send, its notification): once every
    /// block of a region is back, the pool may trim the region and the index may later name other memory.
    /// Loop thread only.
    /// </summary>
    public bool TryGetRegisteredBuffer(ReadOnlyMemory<byte> memory, out ushort bufferIndex)
    {
        ThrowIfNotOnLoopThread();
        return _memory.TryGetRegisteredIndex(memory, out bufferIndex);
    }

    /// <summary>The index under which <paramref name="block"/> is registered with this ring, or -1. Loop
    /// thread.</summary>
    internal int RegisteredBufferIndex(PinnedBlock block) => _memory.RegisteredIndex(block);


    private static readonly Action<object?> s_submitFileRead = static s => FileReads.Submit((FileRead)s!);

    private FileReads? _fileReads; // loop thread: made at the first read

    /// <summary>The loop's pool of reads (any thread).</summary>
    internal FileReadPool FileReadPool => _fileReadPool;

    /// <summary>
    /// Reads up to <paramref name="buffer"/>'s length from <paramref name="file"/> at <paramref name="fileOffset"/>, as
    /// <see cref="RandomAccess.ReadAsync(SafeFileHandle, Memory{byte}, long, CancellationToken)"/> does, with the read
    /// submitted on this loop's ring: no thread waits for it. Returns the bytes read: fewer at the end of the file, 0
    /// at or past it. Any thread.
    /// </summary>
    /// <remarks>
    /// <para>The buffer is pinned and the file handle referenced until the kernel's completion, also when the read is
    /// cancelled: neither is touched after the returned task completes. Memory of this loop's
    /// <see cref="MemoryPool"/> is read into as a fixed buffer (READ_FIXED), where the pool's region is
    /// registered.</para>
    /// <para>The continuation runs on the thread pool, never on the loop thread. A cancelled token cancels a read that
    /// waits in the kernel; one already copying from the page cache completes with its bytes.</para>
    /// <para>On Linux a read of a regular file from the page cache completes when it is submitted; one that needs the
    /// disk is waited for by the kernel (its asynchronous buffered reads, or an io-wq worker), not by a .NET
    /// thread.</para>
    /// <para>The loop's stop cancels the reads in flight (they fail with <see cref="ObjectDisposedException"/>). A read
    /// the kernel cannot cancel that outlives the stop's deadline (10 s; a hung network file system) fails the same
    /// way when the loop leaves, but its buffer stays pinned and its file referenced (never closed) for good, as the
    /// kernel may still write: such a buffer must not be reused.</para>
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

    /// <summary>The caller took a read's result: it serves the next read (up to a bound).</summary>
    /// <summary>The loop's file reads in flight, made at the first. Loop thread.</summary>
    internal FileReads FileReadsOnLoop()
    {
        AssertOnLoopThread();
        return _fileReads ??= new FileReads(this);
    }
}
