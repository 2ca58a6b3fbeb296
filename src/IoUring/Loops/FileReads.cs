using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

/// <summary>The owner of the loop's file reads: each read in flight has a slot, its user_data tag. Loop thread
/// only.</summary>
[SupportedOSPlatform("linux")]
internal sealed unsafe class FileReads : RingOwner
{
    private const uint KindRead = 1;
    private const uint KindCancel = 2;

    private FileRead?[] _slots = new FileRead?[16];
    private int[] _free = new int[16];   // a stack of free slot numbers
    private int _freeCount;
    private int _used;                   // slots ever handed out: the free stack holds the rest below it

    public FileReads(EventLoop loop) : base(loop) => loop.Stopping += Release;

    /// <summary>Fails the read if the loop is stopping or gone (the post then runs elsewhere).</summary>
    public static void Submit(FileRead read)
    {
        EventLoop loop = read.Loop;
        if (!loop.IsOnLoopThread || loop.IsStopping)
        {
            read.Complete(0, Stopped());
            return;
        }
        loop.FileReadsOnLoop().SubmitOnLoop(read);
    }

    /// <summary>Any thread: posts the cancel to the loop.</summary>
    public static void RequestCancel(FileRead read, short version)
    {
        try
        {
            read.Loop.Post(static s =>
            {
                var (read, version) = ((FileRead, short))s!;
                if (read.Loop.IsOnLoopThread && !read.Loop.IsStopping)
                {
                    read.Loop.FileReadsOnLoop().Cancel(read, version);
                }
            }, (read, version));
        }
        catch (ObjectDisposedException)
        {
            // The loop stopped: its stop ended the read.
        }
    }

    private void SubmitOnLoop(FileRead read)
    {
        Loop.AssertOnLoopThread();
        if (Loop.IsStopping || IsReleased)
        {
            read.Complete(0, Stopped()); // the stop is under way
            return;
        }
        if (read.CancelRequested)
        {
            read.Complete(0, new OperationCanceledException(read.Token));
            return;
        }
        if (_used == UserData.MaxTags && _freeCount == 0)
        {
            read.Complete(0, new InvalidOperationException(
                $"{UserData.MaxTags} file reads are in flight on this loop: no more can be tracked."));
            return;
        }
        int slot = RentSlot(read);
        io_uring_sqe* sqe = Loop.TryNewSqe(this, KindRead, (uint)slot);
        if (sqe == null)
        {
            // Retried after this iteration's submit; once the loop is gone the read, never in the kernel, fails.
            ReturnSlot(slot);
            Loop.RetryNextIteration(read, static r => Submit(r), static r => r.Complete(0, Stopped()));
            return;
        }
        if (Loop.TryGetRegisteredBuffer(read.Buffer, out ushort bufferIndex))
        {
            sqe->opcode = IORING_OP_READ_FIXED;
            sqe->buf_index = bufferIndex;
        }
        else
        {
            sqe->opcode = IORING_OP_READ;
        }
        sqe->fd = read.FileDescriptor;
        // SAFETY: the read keeps its buffer pinned until this READ's final completion (FileRead.Complete).
        sqe->addr = (ulong)read.Address;
        sqe->len = (uint)read.Buffer.Length;
        sqe->off = (ulong)read.Offset;
    }

    /// <summary>A read not submitted yet is not submitted; one in flight gets an ASYNC_CANCEL.</summary>
    public void Cancel(FileRead read, short version)
    {
        if (read.Version != version || IsReleased)
        {
            return; // completed and reused, or the loop's stop cancels it
        }
        read.CancelRequested = true;
        if (read.Slot < 0)
        {
            return;
        }
        io_uring_sqe* sqe = Loop.TryNewSqe(this, KindCancel);
        if (sqe == null)
        {
            // Dropped once the loop is gone: its stop ended or abandoned the read.
            Loop.RetryNextIteration(this, reads => reads.Cancel(read, version));
            return;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = UserDataOf(KindRead, (uint)read.Slot);
    }

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        if (kind != KindRead)
        {
            return; // a cancel's own result: the read it aimed at completes by itself
        }
        int slot = (int)UserData.Tag(userData);
        FileRead read = _slots[slot]!;
        ReturnSlot(slot);
        Loop.OnFileRead(Math.Max(result, 0));
        read.Complete(Math.Max(result, 0), result >= 0 ? null : ReadError(read, -result));
    }

    private Exception ReadError(FileRead read, int errno) => errno switch
    {
        Errno.ECANCELED when read.CancelRequested => new OperationCanceledException(read.Token),
        Errno.ECANCELED => Stopped(),
        _ => new IOException($"Reading fd {read.FileDescriptor} at offset {read.Offset} failed: " +
            $"{IoUringException.ErrnoName(errno)} ({Marshal.GetPInvokeErrorMessage(errno)}).", -errno),
    };

    internal static ObjectDisposedException Stopped()
        => new(nameof(EventLoop), "The event loop stopped before the file read completed.");

    /// <summary>The stop's deadline passed with reads in the kernel: their awaiters fail now
    /// (<see cref="FileRead.Abandon"/>), and this owner is never freed.</summary>
    public void AbandonInFlight()
    {
        Loop.AssertOnLoopThread();
        for (int slot = 0; slot < _used; slot++)
        {
            if (_slots[slot] is { } read)
            {
                _slots[slot] = null;
                read.Abandon(new ObjectDisposedException(nameof(EventLoop),
                    "The event loop stopped with the file read still in the kernel (not ended within the stop's " +
                    "deadline): its buffer may still be written and stays pinned, and the file stays referenced."));
            }
        }
    }

    private int RentSlot(FileRead read)
    {
        int slot;
        if (_freeCount > 0)
        {
            slot = _free[--_freeCount];
        }
        else
        {
            if (_used == _slots.Length)
            {
                Array.Resize(ref _slots, Math.Min(_slots.Length * 2, UserData.MaxTags));
                Array.Resize(ref _free, _slots.Length);
            }
            slot = _used++;
        }
        _slots[slot] = read;
        read.Slot = slot;
        return slot;
    }

    private void ReturnSlot(int slot)
    {
        _slots[slot]!.Slot = -1;
        _slots[slot] = null;
        _free[_freeCount++] = slot;
    }
}
