using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Testing;

/// <summary>
/// Test seam (<see cref="TestHooks.Faults"/>): just before submission, turns chosen SQEs into NOPs that the kernel
/// completes with an injected -errno (IORING_NOP_INJECT_RESULT), keeping user_data and link flags, so the owner sees
/// a real failure. Only data-path opcodes may be targeted (never CLOSE or cancels), so injection cannot leak an fd.
/// </summary>
internal sealed class FaultInjector
{
    private static readonly byte[] s_injectable =
    [
        IORING_OP_RECV, IORING_OP_RECVMSG, IORING_OP_SEND, IORING_OP_SENDMSG, IORING_OP_SEND_ZC, IORING_OP_SENDMSG_ZC,
        IORING_OP_ACCEPT, IORING_OP_CONNECT, IORING_OP_NOP, IORING_OP_SPLICE,
    ];

    private readonly Random _random;
    private readonly byte[] _opcodes;
    private readonly int[] _errnos;
    private readonly double _probability;
    private int _injected;

    public FaultInjector(byte[] opcodes, int[] errnos, double probability, int seed)
    {
        foreach (byte op in opcodes)
        {
            if (Array.IndexOf(s_injectable, op) < 0)
            {
                throw new ArgumentException($"Opcode {op} cannot be failed by injection.", nameof(opcodes));
            }
        }
        ArgumentOutOfRangeException.ThrowIfZero(errnos.Length);
        _opcodes = opcodes;
        _errnos = errnos;
        _probability = probability;
        _random = new Random(seed);
    }

    private int _enterFailure;

    /// <summary>The loop's next io_uring_enter is not made and fails with <paramref name="errno"/>.</summary>
    public void FailNextEnter(int errno) => Volatile.Write(ref _enterFailure, errno);

    /// <summary>Loop thread: the errno to fail the enter with, or 0.</summary>
    public int TakeEnterFailure()
        => Volatile.Read(ref _enterFailure) == 0 ? 0 : Interlocked.Exchange(ref _enterFailure, 0);

    private int _sqesToRefuse;
    private int _sqesToGive;
    private int _sqesRefused;

    /// <summary>After <paramref name="after"/> more, the next <paramref name="count"/> SQEs owners ask for are
    /// refused, as when the SQ stays full; the loop's own requests are not.</summary>
    public void RefuseSqes(int count, int after = 0)
    {
        Volatile.Write(ref _sqesToGive, after);
        Volatile.Write(ref _sqesToRefuse, count);
    }

    public int SqesRefused => Volatile.Read(ref _sqesRefused);

    private int _loopSqesToRefuse;

    /// <summary>The loop's own next <paramref name="count"/> requests (wakeup re-arm, stop's cancel-all) are
    /// refused.</summary>
    public void RefuseLoopSqes(int count) => Volatile.Write(ref _loopSqesToRefuse, count);

    public bool TakeLoopSqeRefusal()
    {
        if (Volatile.Read(ref _loopSqesToRefuse) <= 0 || Interlocked.Decrement(ref _loopSqesToRefuse) < 0)
        {
            return false;
        }
        Interlocked.Increment(ref _sqesRefused);
        return true;
    }

    public bool TakeSqeRefusal()
    {
        if (Volatile.Read(ref _sqesToRefuse) <= 0 || Interlocked.Decrement(ref _sqesToGive) >= 0
            || Interlocked.Decrement(ref _sqesToRefuse) < 0)
        {
            return false;
        }
        Interlocked.Increment(ref _sqesRefused);
        return true;
    }

    public int Injected => Volatile.Read(ref _injected);

    private int _fdCancels;

    /// <summary>Cancels by fd (IORING_ASYNC_CANCEL_FD) submitted: each walks the ring's pending requests, so their
    /// cost grows with the open connections.</summary>
    public int FdCancels => Volatile.Read(ref _fdCancels);

    /// <summary>Any thread, before a send(2) (SEND) or sendmsg(2) (SENDMSG) made off the ring: the errno to fail it
    /// with, or 0.</summary>
    public int TakeCallerSendFault(byte opcode)
    {
        lock (_random)
        {
            if (Array.IndexOf(_opcodes, opcode) < 0 || _random.NextDouble() >= _probability)
            {
                return 0;
            }
            _injected++;
            _callerSendFaults++;
            return _errnos[_random.Next(_errnos.Length)];
        }
    }

    private int _callerSendFaults;

    /// <summary>Of <see cref="Injected"/>, those given to sends made off the ring.</summary>
    public int CallerSendFaults => Volatile.Read(ref _callerSendFaults);

    private readonly int[] _observed = new int[256];
    private int _failOpcode = -1;
    private int _failAfter;
    private int _failErrno;

    /// <summary>SQEs of <paramref name="opcode"/> submitted, failed ones included.</summary>
    public int Observed(byte opcode) => Volatile.Read(ref _observed[opcode]);

    private readonly List<byte> _submitted = new();
    private const int SubmittedKept = 4096;

    public byte[] SubmittedOpcodes()
    {
        lock (_random)
        {
            return _submitted.ToArray();
        }
    }

    /// <summary>The SQE of <paramref name="opcode"/> after <paramref name="after"/> more fails with
    /// <paramref name="errno"/>.</summary>
    public void FailSqe(byte opcode, int after, int errno)
    {
        if (Array.IndexOf(s_injectable, opcode) < 0)
        {
            throw new ArgumentException($"Opcode {opcode} cannot be failed by injection.", nameof(opcode));
        }
        lock (_random)
        {
            _failOpcode = opcode;
            _failAfter = after;
            _failErrno = errno;
        }
    }

    /// <summary>Loop thread, right before io_uring_enter; the last <paramref name="holdBack"/> SQEs wait for a later
    /// one.</summary>
    public unsafe void Apply(Rings.Ring ring, uint holdBack)
    {
        lock (_random) // one injector may serve several loops
        {
            ApplyUnsynchronized(ring, holdBack);
        }
    }

    private unsafe void ApplyUnsynchronized(Rings.Ring ring, uint holdBack)
    {
        Debug.Assert(Monitor.IsEntered(_random), "ApplyUnsynchronized without the injector's lock");
        uint count = ring.UnpublishedCount - holdBack;
        for (uint i = 0; i < count; i++)
        {
            io_uring_sqe* sqe = ring.UnpublishedSqe(i);
            if (sqe->opcode == IORING_OP_ASYNC_CANCEL && (sqe->cancel_flags & IORING_ASYNC_CANCEL_FD) != 0)
            {
                _fdCancels++;
            }
            Interlocked.Increment(ref _observed[sqe->opcode]);
            if (_submitted.Count < SubmittedKept)
            {
                _submitted.Add(sqe->opcode);
            }
            int errno;
            if (sqe->opcode == _failOpcode && _failAfter-- == 0)
            {
                _failOpcode = -1;
                errno = _failErrno;
            }
            else if (Array.IndexOf(_opcodes, sqe->opcode) < 0 || _random.NextDouble() >= _probability)
            {
                continue;
            }
            else
            {
                errno = _errnos[_random.Next(_errnos.Length)];
            }
            ulong userData = sqe->user_data;
            // Link flags stay, so the chain's rest is cancelled as after a real failure; BUFFER_SELECT would make the
            // NOP take a buffer.
            byte links = (byte)(sqe->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK));
            *sqe = new io_uring_sqe
            {
                opcode = IORING_OP_NOP,
                flags = links,
                nop_flags = IORING_NOP_INJECT_RESULT,
                len = unchecked((uint)-errno),
                user_data = userData,
            };
            _injected++;
        }
    }
}
