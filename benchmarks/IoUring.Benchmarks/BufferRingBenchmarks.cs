using System.Runtime.InteropServices;
using BenchmarkDotNet.Attributes;
using IoUring.Benchmarks.Support;
using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Benchmarks;

/// <summary>
/// Buffer selection fed by a provided buffer ring (the internal <see cref="BufferRing"/>: Recycle + Publish) versus
/// the legacy IORING_OP_PROVIDE_BUFFERS, giving buffers back <see cref="Replenish"/> at a time. Times are per
/// request that consumed one buffer.
/// </summary>
/// <remarks>
/// <para>The request is a 1-byte RECV with IOSQE_BUFFER_SELECT on an AF_UNIX stream socketpair. A NOP cannot be
/// used: on Linux 6.18 IORING_OP_NOP with IOSQE_BUFFER_SELECT completes with -EOPNOTSUPP (NOP no longer supports
/// buffer selection), so the seed's NOP test cannot be repeated as such.</para>
/// <para>One round: one write() of 32 bytes, then one io_uring_enter that submits 32 RECVs (each takes one byte
/// and one buffer, completing inline because the data is already there) and waits for their 32 CQEs; then the 32
/// buffers are given back. The ring variant rewrites the entries and publishes the tail every
/// <see cref="Replenish"/> buffers; the legacy variant queues 32 / <see cref="Replenish"/> PROVIDE_BUFFERS SQEs
/// (with IOSQE_CQE_SKIP_SUCCESS, so they cost no CQE) that go to the kernel with the next round's enter, ahead of
/// its RECVs. Both variants make the same system calls: one write and one enter per 32 requests.</para>
/// </remarks>
[MemoryDiagnoser]
public unsafe class BufferRingBenchmarks
{
    /// <summary>RECVs (and consumed buffers) per benchmark invocation: one round.</summary>
    public const int OperationsPerInvoke = 32;

    private const int BufferCount = 64;
    private const int BufferSize = 64;
    private const ushort RingGroup = 1;
    private const ushort LegacyGroup = 2;
    private const ulong ProvideUserData = ulong.MaxValue;

    private Ring _ring = null!;
    private BufferRing _bufferRing = null!;
    private byte* _legacyBuffers;
    private byte* _payload;
    private ushort* _bids;
    private int _reader = -1;
    private int _writer = -1;
    private uint _pendingProvides;  // legacy: PROVIDE_BUFFERS SQEs queued for the next enter
    private int _replenish;

    [Params(1, 32)]
    public int Replenish { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _replenish = Replenish;
        _ring = Ring.Create(new RingOptions { SqEntries = 128 });
        _bufferRing = new BufferRing(_ring, RingGroup, BufferCount, BufferSize);

        _legacyBuffers = (byte*)NativeMemory.AlignedAlloc(BufferCount * BufferSize, 4096);
        _payload = (byte*)NativeMemory.AllocZeroed(OperationsPerInvoke);
        _bids = (ushort*)NativeMemory.AllocZeroed(OperationsPerInvoke * sizeof(ushort));

        int* fds = stackalloc int[2];
        if (Libc.socketpair(Libc.AF_UNIX, Libc.SOCK_STREAM | Libc.SOCK_CLOEXEC, 0, fds) != 0)
        {
            Fail.Call("socketpair", Libc.GetLastErrno());
        }
        (_reader, _writer) = (fds[0], fds[1]);

        // Hand all legacy buffers to the kernel once, checking the PROVIDE_BUFFERS result this time.
        QueueProvide(0, BufferCount, skipSuccessCqe: false);
        int submitted = _ring.Enter(minComplete: 1);
        if (submitted != 1)
        {
            Fail.Enter(submitted, 1);
        }
        uint ready = _ring.ReadyCompletions(out uint head);
        io_uring_cqe* cqe = _ring.CqeAt(head);
        if (ready != 1 || cqe->user_data != ProvideUserData || cqe->res < 0)
        {
            Fail.Check($"PROVIDE_BUFFERS of the legacy group failed: {ready} CQEs, res {cqe->res}.");
        }
        _ring.AdvanceCq(ready);
        _pendingProvides = 0;

        _ = BufferRing();
        _ = ProvideBuffers();
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _bufferRing.Dispose();
        _ring.Dispose();    // unsubmitted PROVIDE_BUFFERS SQEs go with it
        _ = Libc.close(_reader);
        _ = Libc.close(_writer);
        NativeMemory.AlignedFree(_legacyBuffers);
        NativeMemory.Free(_payload);
        NativeMemory.Free(_bids);
    }

    [Benchmark(Baseline = true, OperationsPerInvoke = OperationsPerInvoke)]
    public int BufferRing()
    {
        int checksum = ReceiveRound(RingGroup);
        BufferRing bufferRing = _bufferRing;
        int replenish = _replenish;
        for (int i = 0; i < OperationsPerInvoke; i++)
        {
            bufferRing.Recycle(_bids[i]);
            if ((i + 1) % replenish == 0)
            {
                bufferRing.Publish();
            }
        }
        return checksum;
    }

    [Benchmark(OperationsPerInvoke = OperationsPerInvoke)]
    public int ProvideBuffers()
    {
        int checksum = ReceiveRound(LegacyGroup);
        int replenish = _replenish;
        for (int i = 0; i < OperationsPerInvoke; i += replenish)
        {
            ushort first = _bids[i];
            // One PROVIDE_BUFFERS hands back a range of consecutive ids; the kernel hands legacy buffers out in
            // the order they were provided, so each range comes back whole.
            for (int j = 1; j < replenish; j++)
            {
                if (_bids[i + j] != first + j)
                {
                    Fail.Check($"Legacy buffers came back out of order: {_bids[i + j]} after {first} + {j - 1}.");
                }
            }
            QueueProvide(first, replenish, skipSuccessCqe: true);
        }
        return checksum;
    }

    /// <summary>One write of 32 bytes, then 32 one-byte RECVs selecting from <paramref name="group"/>, in one enter.</summary>
    private int ReceiveRound(ushort group)
    {
        if (Libc.write(_writer, _payload, OperationsPerInvoke) != OperationsPerInvoke)
        {
            Fail.Call("write", Libc.GetLastErrno());
        }
        Ring ring = _ring;
        for (int i = 0; i < OperationsPerInvoke; i++)
        {
            io_uring_sqe* sqe = ring.TryGetSqe();
            if (sqe == null)
            {
                Fail.SubmissionQueueFull();
            }
            sqe->opcode = IORING_OP_RECV;
            sqe->fd = _reader;
            sqe->len = 1;
            sqe->flags = IOSQE_BUFFER_SELECT;
            sqe->buf_group = group;
            sqe->user_data = (ulong)i;
        }
        uint expected = OperationsPerInvoke + _pendingProvides;
        int submitted = ring.Enter(minComplete: OperationsPerInvoke);
        if (submitted != (int)expected)
        {
            Fail.Enter(submitted, expected);
        }
        _pendingProvides = 0;

        uint ready = ring.ReadyCompletions(out uint head);
        if (ready != OperationsPerInvoke)
        {
            Fail.Completions(ready, OperationsPerInvoke);
        }
        int checksum = 0;
        for (uint i = 0; i < ready; i++)
        {
            io_uring_cqe* cqe = ring.CqeAt(head + i);
            if (cqe->res != 1 || (cqe->flags & IORING_CQE_F_BUFFER) == 0 || cqe->user_data >= OperationsPerInvoke)
            {
                Fail.Check($"RECV completion user_data {cqe->user_data}: res {cqe->res}, flags 0x{cqe->flags:x} (expected 1 byte in a selected buffer).");
            }
            ushort bid = (ushort)(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
            _bids[i] = bid;
            checksum += bid;
        }
        ring.AdvanceCq(ready);
        return checksum;
    }

    /// <summary>Queues IORING_OP_PROVIDE_BUFFERS for legacy buffers [first, first + count).</summary>
    private void QueueProvide(int first, int count, bool skipSuccessCqe)
    {
        io_uring_sqe* sqe = _ring.TryGetSqe();
        if (sqe == null)
        {
            Fail.SubmissionQueueFull();
        }
        sqe->opcode = IORING_OP_PROVIDE_BUFFERS;
        sqe->fd = count;                                         // number of buffers
        sqe->addr = (ulong)(_legacyBuffers + first * BufferSize);
        sqe->len = BufferSize;
        sqe->off = (ulong)first;                                 // id of the first buffer
        sqe->buf_group = LegacyGroup;
        sqe->flags = skipSuccessCqe ? IOSQE_CQE_SKIP_SUCCESS : (byte)0;
        sqe->user_data = ProvideUserData;
        _pendingProvides++;
    }
}
