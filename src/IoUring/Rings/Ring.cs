using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Rings;

/// <summary>
/// One io_uring instance: the fd, the mapped SQ/CQ rings and the SQE array. Not thread-safe: one thread
/// (the loop's) produces SQEs, consumes CQEs and calls <see cref="Enter"/>.
/// </summary>
/// <remarks>The mappings live from <see cref="Create"/> to <see cref="Dispose"/>; unmapping before close is safe, as
/// the kernel holds the ring until its fd closes.</remarks>
internal sealed unsafe class Ring : IDisposable
{
    private const uint RegisteredRingFdAuto = 0xFFFFFFFF;

    private int _fd = -1;
    private int _enterFd = -1;      // the ring fd, or its registered index when RegisteredRingFd
    private uint _enterFlags;       // IORING_ENTER_REGISTERED_RING when registered
    private int _registeredThreadId;

    private byte* _sqRing;
    private nuint _sqRingSize;
    private byte* _cqRing;          // equals _sqRing with IORING_FEAT_SINGLE_MMAP
    private nuint _cqRingSize;
    private io_uring_sqe* _sqes;
    private nuint _sqesSize;

    private uint* _sqHead;
    private uint* _sqTail;
    private uint* _sqFlags;
    private uint _sqMask;
    private uint _sqeTail;          // SQEs handed out but not yet published to *_sqTail

    private uint* _cqHead;
    private uint* _cqTail;
    private uint* _cqOverflow;
    private io_uring_cqe* _cqes;
    private uint _cqMask;

    private Ring() { }

    public int Fd => _fd;
    public uint SetupFlags { get; private set; }
    public uint Features { get; private set; }
    public uint SqEntries { get; private set; }
    public uint CqEntries { get; private set; }
    public bool IsRingFdRegistered => (_enterFlags & IORING_ENTER_REGISTERED_RING) != 0;

    public bool HasNoIoWait => (Features & IORING_FEAT_NO_IOWAIT) != 0;

    /// <summary>Waits pass IORING_ENTER_NO_IOWAIT; only where <see cref="HasNoIoWait"/> (else EINVAL).</summary>
    public bool SuppressesIoWait
    {
        get => _waitFlags != 0;
        set
        {
            Debug.Assert(!value || HasNoIoWait, "IORING_ENTER_NO_IOWAIT on a kernel without IORING_FEAT_NO_IOWAIT");
            _waitFlags = value ? IORING_ENTER_NO_IOWAIT : 0;
        }
    }

    private uint _waitFlags; // added to enters that wait
    public bool IsDisposed => _fd < 0;

    /// <summary>Setup attempts the last <see cref="Create"/> refused before one succeeded (tests).</summary>
    public int RefusedSetupAttempts { get; private set; }

    /// <summary>Sets up a ring with the best flag set the kernel accepts.</summary>
    /// <exception cref="IoUringUnavailableException">Not Linux, or io_uring is switched off, missing, or memory could
    /// not be locked.</exception>
    public static Ring Create(RingOptions options)
    {
        ArgumentNullException.ThrowIfNull(options);
        // Every way into io_uring sets up a ring first, so this is the one check before a native call: elsewhere there
        // is no libc (Windows) or syscall 425 is another call (macOS).
        if ((options.Hooks?.OtherOperatingSystem ?? OtherOperatingSystem()) is { } other)
        {
            throw new IoUringUnavailableException($"io_uring needs Linux; this is {other}.", Errno.ENOSYS);
        }
        var ring = new Ring();
        try
        {
            ring.Setup(options);
            if (options.RegisterRingFd && !options.StartDisabled)
            {
                ring.TryRegisterRingFd();
            }
            return ring;
        }
        catch
        {
            ring.Dispose();
            throw;
        }
    }

    private static string? OtherOperatingSystem()
        => OperatingSystem.IsLinux() ? null
            : OperatingSystem.IsWindows() ? "Windows"
            : OperatingSystem.IsMacOS() ? "macOS"
            : RuntimeInformation.OSDescription;

    private void Setup(RingOptions options)
    {
        uint flags = options.Flags | (options.StartDisabled ? IORING_SETUP_R_DISABLED : 0) | IORING_SETUP_CQSIZE;
        uint cqEntries = options.CqEntries != 0 ? options.CqEntries : options.SqEntries * 4;
        int fallbackIndex = 0;
        int enomemRetries = 0;
        io_uring_params p;
        while (true)
        {
            p = default;
            p.flags = flags;
            p.cq_entries = cqEntries;
            int fd;
            int errno;
            if (options.Hooks is { SetupErrno: not 0 } hooks)
            {
                (fd, errno) = (-1, hooks.SetupErrno);
            }
            else if ((flags & (options.Hooks?.RefusedSetupFlags ?? 0)) != 0)
            {
                (fd, errno) = (-1, Errno.EINVAL);
            }
            else
            {
                fd = Libc.io_uring_setup(options.SqEntries, &p);
                errno = fd < 0 ? Libc.GetLastErrno() : 0;
            }

            if (fd >= 0)
            {
                _fd = _enterFd = fd;
                break;
            }

            switch (errno)
            {
                case Errno.EINVAL when fallbackIndex < RingOptions.FallbackOrder.Length:
                    // Give up the newest optional flag still in the set, and try again.
                    RefusedSetupAttempts++;
                    while (fallbackIndex < RingOptions.FallbackOrder.Length
                        && (flags & RingOptions.FallbackOrder[fallbackIndex]) == 0)
                    {
                        fallbackIndex++;
                    }
                    if (fallbackIndex < RingOptions.FallbackOrder.Length)
                    {
                        flags &= ~RingOptions.FallbackOrder[fallbackIndex++];
                        continue;
                    }
                    throw IoUringException.FromErrno(
                        $"io_uring_setup(entries: {options.SqEntries}, cq_entries: {cqEntries})", errno);
                case Errno.EPERM:
                case Errno.ENOSYS:
                    throw new IoUringUnavailableException(
                        $"io_uring unavailable: io_uring_setup failed with {IoUringException.ErrnoName(errno)}. " +
                        "It is disabled by sysctl (kernel.io_uring_disabled), blocked by a seccomp filter " +
                        "(container runtimes' default profiles), or missing from this kernel.", errno);
                case Errno.ENOMEM when enomemRetries < 5:
                    // Ring memory of a closed ring is released asynchronously; a quick restart can briefly see ENOMEM.
                    Thread.Sleep(10 << enomemRetries++);
                    continue;
                case Errno.ENOMEM:
                    throw new IoUringUnavailableException(
                        $"io_uring unavailable: io_uring_setup(entries: {options.SqEntries}, " +
                        $"cq_entries: {cqEntries}) failed with ENOMEM after retries. Ring memory counts against " +
                        "RLIMIT_MEMLOCK for processes without CAP_IPC_LOCK: raise it (ulimit -l, LimitMEMLOCK= in " +
                        "systemd, --ulimit memlock in containers) or use fewer or smaller rings.", errno);
                default:
                    throw IoUringException.FromErrno("io_uring_setup", errno);
            }
        }

        SetupFlags = flags;
        Features = p.features & ~(options.Hooks?.HiddenFeatures ?? 0);
        SqEntries = p.sq_entries;
        CqEntries = p.cq_entries;
        MapRings(in p);
    }

    private void MapRings(in io_uring_params p)
    {
        // With NO_SQARRAY sq_off.array is 0 and this over-estimates; the single mapping takes the CQ size anyway.
        _sqRingSize = p.sq_off.array + p.sq_entries * sizeof(uint);
        _cqRingSize = p.cq_off.cqes + p.cq_entries * (nuint)sizeof(io_uring_cqe);
        bool singleMmap = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;
        if (singleMmap)
        {
            _sqRingSize = _cqRingSize = Math.Max(_sqRingSize, _cqRingSize);
        }

        _sqRing = Map(_sqRingSize, IORING_OFF_SQ_RING, "SQ ring");
        _cqRing = singleMmap ? _sqRing : Map(_cqRingSize, IORING_OFF_CQ_RING, "CQ ring");
        _sqesSize = p.sq_entries * (nuint)sizeof(io_uring_sqe);
        _sqes = (io_uring_sqe*)Map(_sqesSize, IORING_OFF_SQES, "SQE array");

        _sqHead = (uint*)(_sqRing + p.sq_off.head);
        _sqTail = (uint*)(_sqRing + p.sq_off.tail);
        _sqFlags = (uint*)(_sqRing + p.sq_off.flags);
        _sqMask = *(uint*)(_sqRing + p.sq_off.ring_mask);
        _sqeTail = *_sqTail;
        if ((p.flags & IORING_SETUP_NO_SQARRAY) == 0)
        {
            // Identity mapping, written once: SQE i is always at slot i.
            uint* array = (uint*)(_sqRing + p.sq_off.array);
            for (uint i = 0; i < p.sq_entries; i++)
            {
                array[i] = i;
            }
        }

        _cqHead = (uint*)(_cqRing + p.cq_off.head);
        _cqTail = (uint*)(_cqRing + p.cq_off.tail);
        _cqOverflow = (uint*)(_cqRing + p.cq_off.overflow);
        _cqes = (io_uring_cqe*)(_cqRing + p.cq_off.cqes);
        _cqMask = *(uint*)(_cqRing + p.cq_off.ring_mask);
    }

    private byte* Map(nuint size, long offset, string what)
    {
        void* address = Libc.mmap(null, size, Libc.PROT_READ | Libc.PROT_WRITE, Libc.MAP_SHARED | Libc.MAP_POPULATE,
            _fd, offset);
        if (address == Libc.MAP_FAILED)
        {
            int errno = Libc.GetLastErrno();
            if (errno == Errno.ENOMEM)
            {
                throw new IoUringUnavailableException(
                    $"io_uring unavailable: mapping the {what} ({size} bytes) failed with ENOMEM; check " +
                    "RLIMIT_MEMLOCK.", errno);
            }
            throw IoUringException.FromErrno($"mmap({what})", errno);
        }
        return (byte*)address;
    }

    /// <summary>Enables a ring created with <see cref="RingOptions.StartDisabled"/>; the calling thread becomes its
    /// single issuer.</summary>
    public void Enable(bool registerRingFd)
    {
        if ((SetupFlags & IORING_SETUP_R_DISABLED) != 0)
        {
            Register(IORING_REGISTER_ENABLE_RINGS, null, 0, "IORING_REGISTER_ENABLE_RINGS");
        }
        if (registerRingFd)
        {
            TryRegisterRingFd();
        }
    }

    /// <summary>Registers the ring fd with the calling thread, so enter skips the fd lookup (5.18+).</summary>
    public bool TryRegisterRingFd()
    {
        if (IsRingFdRegistered)
        {
            return true;
        }
        io_uring_rsrc_update update = new() { offset = RegisteredRingFdAuto, data = (ulong)_fd };
        int result = Libc.io_uring_register(_fd, IORING_REGISTER_RING_FDS, &update, 1);
        if (result != 1)
        {
            return false;
        }
        _enterFd = (int)update.offset;
        _enterFlags = IORING_ENTER_REGISTERED_RING;
        _registeredThreadId = Environment.CurrentManagedThreadId;
        return true;
    }

    /// <summary>Undoes <see cref="TryRegisterRingFd"/>; must run on the thread that registered.</summary>
    public void UnregisterRingFd()
    {
        if (!IsRingFdRegistered)
        {
            return;
        }
        Debug.Assert(_registeredThreadId == Environment.CurrentManagedThreadId, "registered ring fds are per thread");
        io_uring_rsrc_update update = new() { offset = (uint)_enterFd };
        _ = Libc.io_uring_register(_fd, IORING_UNREGISTER_RING_FDS, &update, 1);
        _enterFlags = 0;
        _enterFd = _fd;
    }

    public int Register(uint opcode, void* arg, uint count, string what)
    {
        int result = Libc.io_uring_register(_fd, opcode, arg, count);
        if (result < 0)
        {
            throw IoUringException.FromErrno(what, Libc.GetLastErrno());
        }
        return result;
    }

    /// <summary>-errno on failure.</summary>
    public int TryRegister(uint opcode, void* arg, uint count)
    {
        int result = Libc.io_uring_register(_fd, opcode, arg, count);
        return result < 0 ? -Libc.GetLastErrno() : result;
    }

    /// <summary>SQEs written and not yet consumed by the kernel.</summary>
    public uint PendingSubmissions => _sqeTail - Volatile.Read(ref *_sqHead);

    /// <summary>The next free SQE, zeroed; null when the SQ is full.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public io_uring_sqe* TryGetSqe()
    {
        io_uring_sqe* sqe = TryGetSqeUncleared();
        if (sqe != null)
        {
            *sqe = default;
        }
        return sqe;
    }

    /// <summary>As <see cref="TryGetSqe"/>, not zeroed: for a caller that writes all 64 bytes.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public io_uring_sqe* TryGetSqeUncleared()
    {
        uint tail = _sqeTail;
        if (tail - Volatile.Read(ref *_sqHead) >= SqEntries)
        {
            return null;
        }
        _sqeTail = tail + 1;
        return &_sqes[tail & _sqMask];
    }

    public uint FreeSqes => SqEntries - (_sqeTail - Volatile.Read(ref *_sqHead));

    /// <summary>SQEs not yet visible to the kernel.</summary>
    public uint UnpublishedCount => _sqeTail - *_sqTail;

    /// <summary>The <paramref name="index"/>th SQE written since the last <see cref="Enter"/>.</summary>
    public io_uring_sqe* UnpublishedSqe(uint index) => &_sqes[(*_sqTail + index) & _sqMask];

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private void PublishSqes(uint holdBack) => Volatile.Write(ref *_sqTail, _sqeTail - holdBack);

    /// <summary>
    /// Submits the written SQEs but the last <paramref name="holdBack"/> (an unfinished linked chain) and waits for
    /// <paramref name="minComplete"/> completions, at most <paramref name="timeout"/>. Returns the number submitted or
    /// -errno (EINTR, ETIME, EBUSY/EAGAIN when the kernel is short of CQ space).
    /// </summary>
    public int Enter(uint minComplete, __kernel_timespec* timeout = null, uint holdBack = 0)
    {
        PublishSqes(holdBack);
        uint toSubmit = PendingSubmissions - holdBack;
        // GETEVENTS always: under DEFER_TASKRUN it is what runs the deferred completions, and it flushes overflow.
        uint flags = _enterFlags | IORING_ENTER_GETEVENTS | (minComplete != 0 ? _waitFlags : 0);
        int result;
        if (timeout != null)
        {
            io_uring_getevents_arg arg = new() { ts = (ulong)timeout };
            result = Libc.io_uring_enter(_enterFd, toSubmit, minComplete, flags | IORING_ENTER_EXT_ARG, &arg,
                (nuint)sizeof(io_uring_getevents_arg));
        }
        else
        {
            result = Libc.io_uring_enter(_enterFd, toSubmit, minComplete, flags, null, 0);
        }
        return result < 0 ? -Libc.GetLastErrno() : result;
    }

    /// <summary>The kernel holds completions that did not fit in the CQ (IORING_SQ_CQ_OVERFLOW).</summary>
    public bool HasCqOverflow => (Volatile.Read(ref *_sqFlags) & IORING_SQ_CQ_OVERFLOW) != 0;

    /// <summary>Completions the kernel had to drop (only without IORING_FEAT_NODROP).</summary>
    public uint DroppedCompletions => Volatile.Read(ref *_cqOverflow);

    /// <summary>Completions from the CQ head to the tail; read them with <see cref="CqeAt"/>, release them with one
    /// <see cref="AdvanceCq"/>.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public uint ReadyCompletions(out uint head)
    {
        head = *_cqHead;
        return Volatile.Read(ref *_cqTail) - head;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public io_uring_cqe* CqeAt(uint index) => &_cqes[index & _cqMask];

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void AdvanceCq(uint count) => Volatile.Write(ref *_cqHead, *_cqHead + count);

    public void Dispose()
    {
        if (_sqes != null)
        {
            _ = Libc.munmap(_sqes, _sqesSize);
            _sqes = null;
        }
        if (_cqRing != null && _cqRing != _sqRing)
        {
            _ = Libc.munmap(_cqRing, _cqRingSize);
        }
        _cqRing = null;
        if (_sqRing != null)
        {
            _ = Libc.munmap(_sqRing, _sqRingSize);
            _sqRing = null;
        }
        if (_fd >= 0)
        {
            if (IsRingFdRegistered && _registeredThreadId == Environment.CurrentManagedThreadId)
            {
                UnregisterRingFd();
            }
            // A registration left on another thread holds the ring until that thread exits.
            _ = Libc.close(_fd);
        }
        _fd = -1;
        _enterFlags = 0;
    }
}
