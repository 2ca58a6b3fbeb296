using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring;

/// <summary>
/// What this kernel's io_uring offers, probed once per process: the setup flags it accepted, its feature bits,
/// the opcodes it supports (IORING_REGISTER_PROBE) and the optional registrations. When io_uring cannot be used,
/// <see cref="IsSupported"/> is false and <see cref="UnavailableReason"/> says why.
/// </summary>
public sealed class IoUringCapabilities
{
    private static readonly Lazy<IoUringCapabilities> s_current = new(() => Probe(new RingOptions { SqEntries = 8 }));

    private readonly ulong[] _opcodes = new ulong[4]; // 256 bits

    private IoUringCapabilities() { }

    /// <summary>The capabilities of the running kernel, probed on first use.</summary>
    public static IoUringCapabilities Current => s_current.Value;

    /// <summary>True when io_uring and every feature this library requires are available.</summary>
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

    /// <summary>DEFER_TASKRUN was accepted (6.1+): completions run only when the loop asks for them.</summary>
    public bool HasDeferTaskRun => (SetupFlags & IORING_SETUP_DEFER_TASKRUN) != 0;

    /// <summary>Whether the kernel supports <paramref name="opcode"/> (IORING_OP_*).</summary>
    public bool IsOpcodeSupported(byte opcode) => (_opcodes[opcode >> 6] & (1UL << (opcode & 63))) != 0;

    /// <summary>Throws <see cref="IoUringUnavailableException"/> naming the cause when <see cref="IsSupported"/> is false.</summary>
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
            caps.UnavailableReason = "io_uring unavailable: this kernel lacks multishot receive and zero-copy send; Linux 6.0 or later is required.";
            caps.UnavailableErrno = Errno.EINVAL;
        }
        return caps;
    }
}
