using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Testing;

/// <summary>
/// Test seam (<see cref="TestHooks.Faults"/>): just before submission, turns chosen SQEs into NOPs the real kernel
/// completes with an injected error (IORING_NOP_INJECT_RESULT), keeping user_data and link flags, so the owner sees a
/// real failure: one final CQE with -errno, no buffer, the rest of its chain cancelled. Only data-path opcodes may be
/// targeted (never CLOSE or cancels), so injection cannot leak an fd.
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

    /// <param name="opcodes">The opcodes that may fail.</param>
    /// <param name="errnos">The errors to inject (one picked at random each time).</param>
    /// <param name="probability">The chance that a matching SQE fails.</param>
    /// <param name="seed">Random seed, so a failing run can be repeated.</param>
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

    /// <summary>The loop's next io_uring_enter fails with <paramref name="errno"/> instead of being made (SQEs stay
    /// queued).</summary>
    public void FailNextEnter(int errno) => Volatile.Write(ref _enterFailure, errno);

    /// <summary>Loop thread, instead of io_uring_enter: the errno to fail it with, or 0 to make it.</summary>
    public int TakeEnterFailure()
        => Volatile.Read(ref _enterFailure) == 0 ? 0 : Interlocked.Exchange(ref _enterFailure, 0);

    private int _sqesToRefuse;
    private int _sqesToGive;
    private int _sqesRefused;

    /// <summary>
    /// The next <paramref name="count"/> requests owners ask the loop for are refused: EventLoop.NewSqe throws as it
    /// does when the submission queue stays full after an early submit. The loop's own requests (wakeup, stop) are
    /// never refused.
    /// </summary>
    /// <param name="count">How many to refuse.</param>
    /// <param name="after">How many to give first.</param>
    public void RefuseSqes(int count, int after = 0)
    {
        Volatile.Write(ref _sqesToGive, after);
        Volatile.Write(ref _sqesToRefuse, count);
    }

    /// <summary>How many requests were refused so far.</summary>
    public int SqesRefused => Volatile.Read(ref _sqesRefused);

    private int _loopSqesToRefuse;

    /// <summary>The loop's own next <paramref name="count"/> requests (its wakeup READ's re-arm, the stop's cancel-all)
    /// are refused the same way.</summary>
    public void RefuseLoopSqes(int count) => Volatile.Write(ref _loopSqesToRefuse, count);

    /// <summary>Loop thread, asked for one of its own requests: whether to refuse it.</summary>
    public bool TakeLoopSqeRefusal()
    {
        if (Volatile.Read(ref _loopSqesToRefuse) <= 0 || Interlocked.Decrement(ref _loopSqesToRefuse) < 0)
        {
            return false;
        }
        Interlocked.Increment(ref _sqesRefused);
        return true;
    }

    /// <summary>Loop thread, asked for an owner's request: whether to refuse it.</summary>
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

    /// <summary>How many SQEs were turned into failures so far.</summary>
    public int Injected => Volatile.Read(ref _injected);

    private int _fdCancels;

    /// <summary>
    /// Cancel requests submitted so far that search the ring by fd (IORING_ASYNC_CANCEL_FD), observed, not changed: the
    /// kernel walks every pending poll-driven request of the ring for each, so their cost grows with the open
    /// connections.
    /// </summary>
    public int FdCancels => Volatile.Read(ref _fdCancels);

    /// <summary>
    /// Any thread, instead of a send a connection's flushing thread makes itself (send(2) as <paramref name="opcode"/>
    /// SEND, sendmsg(2) as SENDMSG): the errno to fail it with as the kernel would, or 0 to make it.
    /// </summary>
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

    /// <summary>Of <see cref="Injected"/>, the faults given to sends flushing threads made themselves.</summary>
    public int CallerSendFaults => Volatile.Read(ref _callerSendFaults);

    private readonly int[] _observed = new int[256];
    private int _failOpcode = -1;
    private int _failAfter;
    private int _failErrno;

    /// <summary>How many SQEs of <paramref name="opcode"/> were submitted so far (failed ones included), observed, not
    /// changed.</summary>
    public int Observed(byte opcode) => Volatile.Read(ref _observed[opcode]);

    private readonly List<byte> _submitted = new();
    private const int SubmittedKept = 4096;

    /// <summary>The opcodes of the first <see cref="SubmittedKept"/> SQEs submitted, in order.</summary>
    public byte[] SubmittedOpcodes()
    {
        lock (_random)
        {
            return _submitted.ToArray();
        }
    }

    /// <summary>The next SQE of <paramref name="opcode"/> after <paramref name="after"/> more of them fails with
    /// <paramref name="errno"/> (one SQE, chosen by its place rather than by chance).</summary>
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

    /// <summary>Loop thread, right before io_uring_enter, which leaves the last <paramref name="holdBack"/> SQEs
    /// queued (seen at a later submit).</summary>
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
            // The link flags stay: a failed link cancels the rest of its chain, as a real failure does. The others go
            // (BUFFER_SELECT would make the NOP take a buffer, FIXED_FILE names no file a NOP has).
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
