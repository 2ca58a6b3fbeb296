using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using IoUring.Benchmarks.Support;
using IoUring.Interop;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Benchmarks;

/// <summary>
/// NOP submit + complete straight on the internal <see cref="Ring"/>: <see cref="Batch"/> NOPs per io_uring_enter,
/// with the ring fd registered (IORING_REGISTER_RING_FDS) or not. Times are per NOP.
/// </summary>
/// <remarks>
/// The ring is created on the benchmark thread without StartDisabled, so that thread is its single issuer (and the
/// thread the ring fd is registered with). BenchmarkDotNet runs setup and workload on one thread; a ring used from
/// another thread would fail io_uring_enter with EEXIST, which the benchmark turns into an exception.
/// </remarks>
[MemoryDiagnoser]
[Config(typeof(Config))]
public unsafe class NopBenchmarks
{
    /// <summary>NOPs per benchmark invocation: a multiple of every batch size.</summary>
    public const int OperationsPerInvoke = 32;

    private Ring _ring = null!;
    private uint _batch;

    [Params(1, 2, 4, 32)]
    public int Batch { get; set; }

    [Params(false, true)]
    public bool RegisterRingFd { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _batch = (uint)Batch;
        _ring = Ring.Create(new RingOptions { SqEntries = 64, RegisterRingFd = RegisterRingFd });
        if (_ring.IsRingFdRegistered != RegisterRingFd)
        {
            throw new InvalidOperationException($"Ring fd registration is {_ring.IsRingFdRegistered}, wanted {RegisterRingFd}.");
        }
        Console.WriteLine($"// NopBenchmarks ring: setup flags 0x{_ring.SetupFlags:x}, registered fd {_ring.IsRingFdRegistered}");
        _ = Nop(); // fails here, not in the middle of a run, if the ring is unusable from this thread
    }

    [GlobalCleanup]
    public void Cleanup() => _ring.Dispose();

    [Benchmark(OperationsPerInvoke = OperationsPerInvoke)]
    public ulong Nop()
    {
        Ring ring = _ring;
        uint batch = _batch;
        ulong checksum = 0;
        for (uint done = 0; done < OperationsPerInvoke; done += batch)
        {
            for (uint i = 0; i < batch; i++)
            {
                io_uring_sqe* sqe = ring.TryGetSqe();
                if (sqe == null)
                {
                    Fail.SubmissionQueueFull();
                }
                sqe->opcode = IORING_OP_NOP;
                sqe->user_data = done + i;
            }
            int submitted = ring.Enter(minComplete: batch);
            if (submitted != (int)batch)
            {
                Fail.Enter(submitted, batch);
            }
            uint ready = ring.ReadyCompletions(out uint head);
            if (ready != batch)
            {
                Fail.Completions(ready, batch);
            }
            for (uint i = 0; i < ready; i++)
            {
                io_uring_cqe* cqe = ring.CqeAt(head + i);
                if (cqe->res != 0)
                {
                    Fail.Result(cqe->res);
                }
                checksum += cqe->user_data;
            }
            ring.AdvanceCq(ready);
        }
        return checksum;
    }

    private sealed class Config : ManualConfig
    {
        public Config() => AddColumn(new ParameterRatioColumn(nameof(RegisterRingFd), false));
    }
}
