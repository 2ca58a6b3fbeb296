using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Rings;

/// <summary>
/// What this kernel's io_uring offers, probed once per process: setup flags, feature bits, opcodes and optional
/// registrations. When io_uring cannot be used, <see cref="IsSupported"/> is false and
/// <see cref="UnavailableReason"/> says why.
/// </summary>
public sealed class IoUringCapabilities
{
    private static readonly Lazy<IoUringCapabilities> s_current = new(() => Probe(new RingOptions { SqEntries = 8 }));

    private ulong[] _opcodes = new ulong[4]; // 256 bits

    private IoUringCapabilities() { }

    /// <summary>The capabilities of the running kernel, probed on first use.</summary>
    public static IoUringCapabilities Current => s_current.Value;

    /// <summary><see cref="Current"/>, or what a test's hooks give or probe: a simulated OS must not reach the native
    /// probe.</summary>
    internal static IoUringCapabilities For(Testing.TestHooks? hooks) => hooks switch
    {
        null => Current,
        { Capabilities: { } given } => given,
        _ => Probe(new RingOptions { SqEntries = 8, Hooks = hooks }),
    };

    /// <summary>True when io_uring and every feature this library requires are available (never off Linux).</summary>
    /// <remarks>A CA1416 platform guard: code it guards may use the Linux-only types.</remarks>
    [SupportedOSPlatformGuard("linux")]
    public bool IsSupported => UnavailableReason is null;

    /// <summary>Why io_uring cannot be used here, or null when it can.</summary>
    public string? UnavailableReason { get; private set; }

    /// <summary>The errno behind <see cref="UnavailableReason"/> (EPERM, ENOSYS, ENOMEM, EINVAL), or 0.</summary>
    public int UnavailableErrno { get; private set; }

    /// <summary>The IORING_SETUP_* flags the kernel accepted for a loop's ring.</summary>
    public uint SetupFlags { get; private set; }

    /// <summary>The IORING_FEAT_* bits the kernel reported.</summary>
    public uint Features { get; private set; }

    /// <summary>The highest opcode the kernel knows, plus one (from IORING_REGISTER_PROBE).</summary>
    public int OpcodeCount { get; private set; }

    /// <summary>The ring fd can be registered (IORING_REGISTER_RING_FDS, 5.18+).</summary>
    public bool HasRegisteredRingFd { get; private set; }

    /// <summary>Provided buffer rings can be registered (IORING_REGISTER_PBUF_RING, 5.19+). Required.</summary>
    public bool HasBufferRing { get; private set; }

    /// <summary>Multishot receive is available (6.0+, detected together with IORING_OP_SEND_ZC). Required.</summary>
    public bool HasMultishotReceive => IsOpcodeSupported(IORING_OP_SEND_ZC);

    /// <summary>Zero-copy send (IORING_OP_SEND_ZC, 6.0+).</summary>
    public bool HasZeroCopySend => IsOpcodeSupported(IORING_OP_SEND_ZC);

    /// <summary>Zero-copy gather send (IORING_OP_SENDMSG_ZC, 6.1+).</summary>
    public bool HasZeroCopySendMsg => IsOpcodeSupported(IORING_OP_SENDMSG_ZC);

    /// <summary>Zero-copy sends accept IORING_SEND_ZC_REPORT_USAGE (6.2+): the notification says whether the kernel
    /// copied after all.</summary>
    public bool HasZeroCopyReportUsage { get; private set; }

    /// <summary>SENDMSG_ZC can take its iovecs from a registered buffer (IORING_RECVSEND_FIXED_BUF, 6.15+).</summary>
    public bool HasZeroCopySendMsgFixed { get; private set; }

    /// <summary>A multishot RECV can be capped at a total byte count (<c>sqe->optlen</c>, 6.17+), so a receiver arms
    /// for no more than its input can take.</summary>
    public bool HasReceiveLimit { get; private set; }

    /// <summary>A receive can fill several provided buffers in one completion (IORING_FEAT_RECVSEND_BUNDLE), used from
    /// 6.15: finding a bundle's buffers needs completions in the order the buffers were taken.</summary>
    public bool HasReceiveBundles { get; private set; }

    /// <summary>A waiting io_uring_enter can ask not to be counted as iowait (IORING_FEAT_NO_IOWAIT, 6.15+; see
    /// <see cref="Loops.EventLoopOptions.ReportIoWait"/>).</summary>
    public bool HasNoIoWait => (Features & IORING_FEAT_NO_IOWAIT) != 0;

    /// <summary>DEFER_TASKRUN was accepted (6.1+): completions run only when the loop asks for them.</summary>
    public bool HasDeferTaskRun => (SetupFlags & IORING_SETUP_DEFER_TASKRUN) != 0;

    /// <summary>Whether the kernel supports <paramref name="opcode"/> (IORING_OP_*).</summary>
    public bool IsOpcodeSupported(byte opcode) => (_opcodes[opcode >> 6] & (1UL << (opcode & 63))) != 0;

    /// <summary>Throws <see cref="IoUringUnavailableException"/> naming the cause when <see cref="IsSupported"/> is
    /// false.</summary>
    public void EnsureSupported()
    {
        if (UnavailableReason is not null)
        {
            throw new IoUringUnavailableException(UnavailableReason, UnavailableErrno);
        }
    }

    internal static unsafe IoUringCapabilities Probe(RingOptions options)
    {
        var caps = new IoUringCapabilities();
        Ring ring;
        try
        {
            ring = Ring.Create(options);
        }
        catch (IoUringException ex)
        {
            caps.UnavailableReason = ex.Message;
            caps.UnavailableErrno = ex.Errno;
            return caps;
        }

        using (ring)
        {
            caps.SetupFlags = ring.SetupFlags;
            caps.Features = ring.Features;
            caps.HasRegisteredRingFd = ring.IsRingFdRegistered;

            const int MaxOps = 256;
            int size = sizeof(io_uring_probe) + MaxOps * sizeof(io_uring_probe_op);
            byte* buffer = stackalloc byte[size];
            new Span<byte>(buffer, size).Clear();
            if (ring.TryRegister(IORING_REGISTER_PROBE, buffer, MaxOps) >= 0)
            {
                var probe = (io_uring_probe*)buffer;
                var ops = (io_uring_probe_op*)(buffer + sizeof(io_uring_probe));
                caps.OpcodeCount = probe->last_op + 1;
                for (int i = 0; i < probe->ops_len; i++)
                {
                    if ((ops[i].flags & IO_URING_OP_SUPPORTED) != 0)
                    {
                        caps._opcodes[ops[i].op >> 6] |= 1UL << (ops[i].op & 63);
                    }
                }
            }

            if (caps.HasZeroCopySend)
            {
                caps.HasZeroCopyReportUsage = ProbeZeroCopyFlag(ring, IORING_SEND_ZC_REPORT_USAGE);
            }
            if (caps.HasZeroCopySendMsg)
            {
                caps.HasZeroCopySendMsgFixed = ProbeFixedSendMsg(ring);
            }
            caps.HasReceiveLimit = ProbeReceiveLimit(ring);
            caps.HasReceiveBundles = (ring.Features & IORING_FEAT_RECVSEND_BUNDLE) != 0
                && Environment.OSVersion.Version >= new Version(6, 15);

            try
            {
                new BufferRing(ring, groupId: 0, count: 1, bufferSize: 64).Dispose();
                caps.HasBufferRing = true;
            }
            catch (IoUringException ex)
            {
                caps.UnavailableReason = ex.Message;
                caps.UnavailableErrno = ex.Errno;
            }
        }

        if (caps.UnavailableReason is null && !caps.HasMultishotReceive)
        {
            caps.UnavailableReason = "io_uring unavailable: this kernel lacks multishot receive and zero-copy send; " +
                "Linux 6.0 or later is required.";
            caps.UnavailableErrno = Errno.EINVAL;
        }
        return caps;
    }

    /// <summary>A SEND_ZC with <paramref name="flag"/> on fd -1: an unknown flag fails preparation (EINVAL).</summary>
    internal static bool ProbeZeroCopyFlag(Ring ring, ushort flag)
        => PreparesWithoutError(ring, new io_uring_sqe { opcode = IORING_OP_SEND_ZC, fd = -1, ioprio = flag });

    /// <summary>A SENDMSG_ZC with IORING_RECVSEND_FIXED_BUF over a registered page on fd -1; false too if the page
    /// cannot be registered (then no send uses fixed buffers).</summary>
    internal static unsafe bool ProbeFixedSendMsg(Ring ring)
    {
        const int PageSize = 4096;
        byte* page = (byte*)NativeMemory.AlignedAlloc(PageSize, PageSize);
        try
        {
            var vector = new iovec { iov_base = (nuint)page, iov_len = PageSize };
            var register = new io_uring_rsrc_register { nr = 1, data = (ulong)&vector };
            if (ring.TryRegister(IORING_REGISTER_BUFFERS2, &register, (uint)sizeof(io_uring_rsrc_register)) < 0)
            {
                return false;
            }
            var message = new Libc.msghdr { msg_iov = &vector, msg_iovlen = 1 };
            bool accepted = PreparesWithoutError(ring, new io_uring_sqe
            {
                opcode = IORING_OP_SENDMSG_ZC,
                fd = -1,
                ioprio = IORING_RECVSEND_FIXED_BUF,
                addr = (ulong)&message,
                buf_index = 0,
            });
            // PreparesWithoutError waited for the probe's final CQE: nothing uses the page now.
            _ = ring.TryRegister(IORING_UNREGISTER_BUFFERS, null, 0);
            return accepted;
        }
        finally
        {
            NativeMemory.AlignedFree(page);
        }
    }

    /// <summary>A multishot RECV with a byte cap (<c>optlen</c>) on fd -1: kernels without the cap refuse it
    /// (EINVAL).</summary>
    internal static bool ProbeReceiveLimit(Ring ring)
        => PreparesWithoutError(ring, new io_uring_sqe
        {
            opcode = IORING_OP_RECV,
            fd = -1,
            ioprio = IORING_RECV_MULTISHOT,
            flags = IOSQE_BUFFER_SELECT,
            optlen = 1,
        });

    /// <summary>Submits <paramref name="probe"/> (on fd -1) and waits for its final CQE: EBADF means preparation
    /// accepted every field and the fd lookup failed.</summary>
    private static unsafe bool PreparesWithoutError(Ring ring, io_uring_sqe probe)
    {
        io_uring_sqe* sqe = ring.TryGetSqe();
        *sqe = probe;
        int result = 0;
        __kernel_timespec timeout = new() { tv_sec = 1 };
        while (true)
        {
            int entered = ring.Enter(1, &timeout);
            if (entered < 0 && entered != -Errno.EINTR)
            {
                return false; // no answer (ETIME): do without the flag
            }
            uint ready = ring.ReadyCompletions(out uint head);
            bool final = false;
            for (uint i = 0; i < ready; i++)
            {
                io_uring_cqe* cqe = ring.CqeAt(head + i);
                if ((cqe->flags & IORING_CQE_F_NOTIF) == 0)
                {
                    result = cqe->res;
                }
                final |= (cqe->flags & IORING_CQE_F_MORE) == 0;
            }
            ring.AdvanceCq(ready);
            if (final)
            {
                return result == -Errno.EBADF;
            }
        }
    }

    internal IoUringCapabilities WithoutReceiveLimitForTesting()
    {
        var copy = (IoUringCapabilities)MemberwiseClone();
        copy.HasReceiveLimit = false;
        return copy;
    }

    internal IoUringCapabilities WithoutReceiveBundlesForTesting()
    {
        var copy = (IoUringCapabilities)MemberwiseClone();
        copy.HasReceiveBundles = false;
        return copy;
    }

    internal IoUringCapabilities WithoutFixedSendMsgForTesting()
    {
        var copy = (IoUringCapabilities)MemberwiseClone();
        copy.HasZeroCopySendMsgFixed = false;
        return copy;
    }

    internal IoUringCapabilities WithZeroCopyForTesting(bool sendMsg, bool reportUsage)
    {
        var copy = (IoUringCapabilities)MemberwiseClone();
        copy._opcodes = (ulong[])_opcodes.Clone();
        if (!sendMsg)
        {
            copy._opcodes[IORING_OP_SENDMSG_ZC >> 6] &= ~(1UL << (IORING_OP_SENDMSG_ZC & 63));
        }
        copy.HasZeroCopyReportUsage &= reportUsage;
        copy.HasZeroCopySendMsgFixed &= sendMsg;
        return copy;
    }
}
