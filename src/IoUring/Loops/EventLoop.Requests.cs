using System.Buffers;
using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Rings;
using IoUring.Testing;
using Microsoft.Win32.SafeHandles;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

// Every request is counted in flight until its final CQE; the stop waits for that count.
public sealed unsafe partial class EventLoop
{
    private CustomValueTable _customValues = new(); // mutable struct: never readonly
    private readonly FaultInjector? _faults; // test seam; null in production: one null check per SQE
    private int _inFlight;          // requests submitted whose final CQE has not arrived

    /// <summary>A zeroed SQE, user_data set; a full SQ is submitted early first.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal io_uring_sqe* NewSqe(RingOwner owner, uint kind, uint tag = 0)
    {
        io_uring_sqe* sqe = NewRawSqe(owner);
        *sqe = default;
        sqe->user_data = UserData.Encode(owner.HandleBits, kind, tag);
        return sqe;
    }

    /// <summary>As <see cref="NewSqe"/>, but null (the exception reported) when the SQ stayed full or the ring is
    /// gone.</summary>
    internal io_uring_sqe* TryNewSqe(RingOwner owner, uint kind, uint tag = 0)
    {
        try
        {
            return NewSqe(owner, kind, tag);
        }
        catch (Exception ex)
        {
            ReportUnhandled(ex);
            return null;
        }
    }

    /// <summary>Runs <paramref name="retry"/> after this iteration's submit made room; dropped once the loop is
    /// gone.</summary>
    internal void RetryNextIteration<T>(T target, Action<T> retry) where T : class
        => Schedule(static s =>
        {
            var (loop, target, retry) = ((EventLoop, T, Action<T>))s!;
            if (loop.CanSubmitHere)
            {
                retry(target);
            }
        }, (this, target, retry));

    /// <summary>For a target holding an fd, memory or a task: once the loop is gone <paramref name="abandon"/> runs
    /// instead, on whatever thread.</summary>
    internal void RetryNextIteration<T>(T target, Action<T> retry, Action<T> abandon) where T : class
        => Schedule(static s =>
        {
            var (loop, target, retry, abandon) = ((EventLoop, T, Action<T>, Action<T>))s!;
            if (loop.CanSubmitHere)
            {
                retry(target);
            }
            else
            {
                abandon(target);
            }
        }, (this, target, retry, abandon));

    // Posts that raced the stop run on the loop thread after the ring closed.
    private bool CanSubmitHere => IsOnLoopThread && !_ring.IsDisposed;

    /// <summary>As <see cref="NewSqe"/>, uncleared: the caller writes the whole SQE, user_data included.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal io_uring_sqe* NewRawSqe(RingOwner owner)
    {
        AssertOnLoopThread();
        ObjectDisposedException.ThrowIf(_ring.IsDisposed, this);
        if (_faults is not null)
        {
            RefuseIfInjected(owner);
        }
        io_uring_sqe* sqe = _ring.TryGetSqeUncleared();
        if (sqe == null)
        {
            sqe = SqeAfterEarlySubmit();
        }
        owner.OnSubmitted();
        _inFlight++;
        _counters.Sqes++;
        return sqe;
    }

    // Test seam (FaultInjector.RefuseSqes): throws as a full SQ does.
    [MethodImpl(MethodImplOptions.NoInlining)]
    private void RefuseIfInjected(RingOwner owner)
    {
        if (owner == _loopRingOwner ? _faults!.TakeLoopSqeRefusal() : _faults!.TakeSqeRefusal())
        {
            throw new InvalidOperationException(
                "The submission queue stays full after io_uring_enter (refused by a test's FaultInjector).");
        }
    }

    internal int FreeSqes => (int)_ring.FreeSqes;

    internal void EnsureCustomValueSlot() => _customValues.EnsureFreeSlot();

    internal uint RentCustomValueSlot(ulong value) => _customValues.Rent(value);

    /// <summary>The SQ is full mid-iteration: submit what is queued, recycled buffers published first. A chain still
    /// open at the tail stays queued, as links do not span io_uring_enter calls (SubmissionQueueTests).</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private io_uring_sqe* SqeAfterEarlySubmit()
    {
        AssertOnLoopThread();
        uint openChain = OpenChainLength();
        if (openChain == _ring.SqEntries)
        {
            // The whole SQ is one open chain: end it and submit it shorter, so later requests neither join it nor
            // find the SQ full.
            _ring.UnpublishedSqe(openChain - 1)->flags &= unchecked((byte)~(IOSQE_IO_LINK | IOSQE_IO_HARDLINK));
            PublishRecycledBuffers();
            SubmitAndWait(wait: false);
            throw new InvalidOperationException(
                "A linked chain (IOSQE_IO_LINK/IOSQE_IO_HARDLINK) longer than the submission queue " +
                $"({_ring.SqEntries} entries) cannot go to the kernel whole; raise " +
                $"{nameof(EventLoopOptions.SubmissionQueueSize)} or shorten the chain.");
        }
        PublishRecycledBuffers();
        SubmitAndWait(wait: false, holdBack: openChain);
        io_uring_sqe* sqe = _ring.TryGetSqeUncleared();
        if (sqe == null)
        {
            throw new InvalidOperationException("The submission queue stays full after io_uring_enter.");
        }
        return sqe;
    }

    /// <summary>Queued SQEs at the tail in a chain whose last link is still to come.</summary>
    private uint OpenChainLength()
    {
        uint count = _ring.UnpublishedCount;
        uint start = count;
        while (start > 0 && (_ring.UnpublishedSqe(start - 1)->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK)) != 0)
        {
            start--;
        }
        return count - start;
    }

    /// <param name="wait">Block for a completion.</param>
    /// <param name="holdBack">SQEs at the tail to leave queued for a later submit.</param>
    private void SubmitAndWait(bool wait, uint holdBack = 0)
    {
        AssertOnLoopThread();
        Debug.Assert(holdBack <= _ring.UnpublishedCount, "holding back more SQEs than are queued");
        // While stopping, bound each wait so the shutdown deadline is checked; without the wakeup READ, so posts run.
        __kernel_timespec timeout = new() { tv_nsec = _wakeupDisarmed ? DisarmedSleep : 100_000_000 };
        FaultInjector? faults = _faults;
        int result;
        if (faults is not null && faults.TakeEnterFailure() is int injected and not 0)
        {
            result = -injected;
        }
        else
        {
            faults?.Apply(_ring, holdBack);
            result = _ring.Enter(wait ? 1u : 0u, wait && (_stopping || _wakeupDisarmed) ? &timeout : null, holdBack);
        }
        _counters.Syscalls++;
        if (result >= 0 || result is -Errno.EINTR or -Errno.ETIME)
        {
            if (_ring.HasCqOverflow)
            {
                _counters.CqOverflows++;
            }
            return;
        }
        switch (-result)
        {
            case Errno.EBUSY:
            case Errno.EAGAIN:
                // The kernel has completions it cannot post until we drain the CQ; the next iteration does.
                _counters.CqOverflows++;
                return;
            case Errno.EBADR:
                throw new IoUringException(
                    "io_uring dropped completions (EBADR): the CQ overflowed and the kernel could not keep them " +
                    $"({_ring.DroppedCompletions} dropped).", Errno.EBADR);
            default:
                throw IoUringException.FromErrno("io_uring_enter", -result);
        }
    }

    private void DrainCompletions()
    {
        AssertOnLoopThread();
        uint ready = _ring.ReadyCompletions(out uint head);
        while (ready != 0)
        {
            for (uint i = 0; i < ready; i++)
            {
                io_uring_cqe* cqe = _ring.CqeAt(head + i);
                Dispatch(cqe->user_data, cqe->res, cqe->flags);
            }
            _ring.AdvanceCq(ready);
            _counters.Cqes += ready;
            ready = _ring.ReadyCompletions(out head);
        }
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void Dispatch(ulong userData, int result, uint flags)
    {
        RingOwner owner = GCHandle<RingOwner>.FromIntPtr(UserData.Handle(userData)).Target;
        bool finalPending = (flags & IORING_CQE_F_MORE) == 0; // the request's end is still to be counted
        // One try region for the whole completion path, owner hooks included.
        try
        {
            uint kind = UserData.Kind(userData);
            if (kind == UserData.CustomKind)
            {
                ulong value = _customValues.Get(UserData.Tag(userData), release: finalPending);
                // Only RingHandlers submit custom requests.
                Debug.Assert(owner is RingHandler);
                Unsafe.As<RingHandler>(owner).OnCompletion(value, result, flags);
            }
            else if ((flags & IORING_CQE_F_BUFFER) != 0)
            {
                (owner.OwnReceiveBuffers ?? _receiveBuffers!).Deliver(owner, kind, result, flags, userData);
            }
            else
            {
                owner.HandleCompletion(kind, result, flags, userData);
            }
            if (finalPending)
            {
                finalPending = false;
                Debug.Assert(_inFlight > 0, "a final completion with no request in flight");
                _inFlight--;
                owner.OnFinalCompletion();
            }
        }
        catch (Exception ex)
        {
            OnDispatchException(owner, ex, finalPending);
        }
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private void OnDispatchException(RingOwner owner, Exception exception, bool finalPending)
    {
        TellOwner(owner, exception);
        if (finalPending)
        {
            _inFlight--;
            try
            {
                owner.OnFinalCompletion();
            }
            catch (Exception ex)
            {
                TellOwner(owner, ex);
            }
        }
    }

    private void TellOwner(RingOwner owner, Exception exception)
    {
        try
        {
            owner.HandleException(exception);
        }
        catch (Exception ex)
        {
            ReportUnhandled(ex);
        }
    }

    /// <summary>Arms the READ on the wakeup eventfd. Without an SQE it is retried each iteration, the loop sleeping at
    /// most <see cref="DisarmedSleep"/> at a time meanwhile.</summary>
    internal void ArmWakeup()
    {
        AssertOnLoopThread();
        io_uring_sqe* sqe = TryNewSqe(_loopRingOwner, LoopRingOwner.KindWakeup);
        _wakeupDisarmed = sqe == null;
        if (sqe == null)
        {
            return;
        }
        sqe->opcode = IORING_OP_READ;
        sqe->fd = _posted.FileDescriptor;
        // SAFETY: the target is freed only by PostedWork.Close once nothing is in flight (drained).
        sqe->addr = (ulong)_posted.ReadTarget;
        sqe->len = sizeof(ulong);
        sqe->off = ulong.MaxValue; // the current position (an eventfd has none)
    }

    // Memory pools and file reads: services built on the requests above.
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
