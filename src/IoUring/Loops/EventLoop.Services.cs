using System.Buffers;
using IoUring.Buffers;
using IoUring.Rings;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Loops;

// Memory pools and file reads.
public sealed partial class EventLoop
{
    /// <summary>This loop's pool of pinned blocks, registered with the ring as fixed buffers where the kernel allows.
    /// Connections' pipes use it by default; any thread may rent.</summary>
    public MemoryPool<byte> MemoryPool => _memory.Pool;

    /// <summary>This loop's pool of 64 KiB pinned blocks (not registered), e.g. for segmented UDP sends. Any thread may
    /// rent.</summary>
    public MemoryPool<byte> LargeMemoryPool => _memory.LargePool;

    internal PinnedBlockMemoryPool? MemoryPoolIfCreated => _memory.PoolIfCreated;

    internal const int LargeBlockSize = LoopMemory.LargeBlockSize;

    internal PinnedBlockMemoryPool LargeBlockPool => _memory.LargePool;

    internal RegisteredBufferTable? BufferTable => _memory.Table;

    /// <summary>Whether <paramref name="memory"/> lies in a registered block of <see cref="MemoryPool"/>, and if so its
    /// index for <c>sqe-&gt;buf_index</c>. Loop thread only.</summary>
    /// <remarks>Keep the block rented until the request's final completion: a trimmed region's index may later name
    /// other memory.</remarks>
    public bool TryGetRegisteredBuffer(ReadOnlyMemory<byte> memory, out ushort bufferIndex)
    {
        ThrowIfNotOnLoopThread();
        return _memory.TryGetRegisteredIndex(memory, out bufferIndex);
    }

    internal int RegisteredBufferIndex(PinnedBlock block) => _memory.RegisteredIndex(block);

    private static readonly Action<object?> s_submitFileRead = static s => FileReads.Submit((FileRead)s!);

    private FileReads? _fileReads; // loop thread

    internal FileReadPool FileReadPool => _fileReadPool;

    /// <summary>Reads up to <paramref name="buffer"/>'s length from <paramref name="file"/> at
    /// <paramref name="fileOffset"/> on this loop's ring, as
    /// <see cref="RandomAccess.ReadAsync(SafeFileHandle, Memory{byte}, long, CancellationToken)"/> does, so no thread
    /// waits. Returns the bytes read, 0 at or past the end. Any thread.</summary>
    /// <remarks>The buffer stays pinned and the file referenced until the kernel's completion, also when cancelled. The
    /// continuation runs on the thread pool. A read the loop's stop cannot cancel in time (a hung network file system)
    /// keeps its buffer pinned for good: do not reuse it.</remarks>
    /// <exception cref="ArgumentNullException"><paramref name="file"/> is null.</exception>
    /// <exception cref="ArgumentException"><paramref name="file"/> is invalid.</exception>
    /// <exception cref="ArgumentOutOfRangeException"><paramref name="fileOffset"/> is negative.</exception>
    /// <exception cref="ObjectDisposedException">The file is closed, or the loop stopped before or during the
    /// read.</exception>
    /// <exception cref="OperationCanceledException">The token was cancelled before the read took any bytes.</exception>
    /// <exception cref="IOException">The kernel refused the read; the message names the errno (EISDIR, EBADF, EINVAL
    /// for unaligned O_DIRECT, EIO, ...).</exception>
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

    internal FileReads FileReadsOnLoop()
    {
        AssertOnLoopThread();
        return _fileReads ??= new FileReads(this);
    }
}
