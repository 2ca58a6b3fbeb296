using System.Runtime.CompilerServices;
using BenchmarkDotNet.Attributes;
using IoUring.Benchmarks.Support;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Benchmarks;

/// <summary>
/// A NOP submitted as a custom operation through the public <see cref="RingHandler"/> (with a random 64-bit value that
/// must come back) versus the same NOP submitted as an internal operation (a <see cref="RingOwner"/> calling
/// EventLoop.GetSqe with an operation kind). Times are per NOP; Ratio is custom / internal.
/// </summary>
/// <remarks>
/// <para>Both run on one <see cref="EventLoop"/> with default options and use the same harness
/// (<see cref="NopStream"/>): an invocation posts one work item that submits <see cref="InFlight"/> NOPs from the loop
/// thread; every completion submits the next NOP from its handler until <see cref="OperationsPerInvoke"/> have
/// completed, so the loop does one io_uring_enter per <see cref="InFlight"/> NOPs, as in steady state. The benchmark
/// thread sleeps until the last completion; that hand-off (an eventfd wake and an event set) is paid once per 8192
/// NOPs by both variants.</para>
/// <para>The only difference is what is measured: Submit's checks, the 64-bit value's slot (rent at submit, look up
/// and return at completion), the SQE copy, and the handler's extra virtual call.</para>
/// <para>Run it pinned (<c>--affinity 2</c>): unpinned, the two threads' placement on this 2-CPU machine makes the
/// per-NOP time jump between two levels ~20% apart for seconds at a time, which swamps a few-percent difference.</para>
/// </remarks>
[MemoryDiagnoser]
public class CustomOperationBenchmarks
{
    /// <summary>NOPs per benchmark invocation.</summary>
    public const int OperationsPerInvoke = 8192;

    private EventLoop _loop = null!;
    private NopStream _stream = null!;
    private InternalNops _internal = null!;
    private CustomNops _custom = null!;

    /// <summary>NOPs kept in flight: how many one io_uring_enter submits.</summary>
    [Params(1, 64)]
    public int InFlight { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _stream = new NopStream(InFlight);
        _loop = new EventLoop(new EventLoopOptions { UnhandledException = _stream.Fault });
        _internal = new InternalNops(_loop, _stream);
        _custom = new CustomNops(_loop, _stream);
        Console.WriteLine($"// CustomOperationBenchmarks loop: setup flags 0x{_loop.SetupFlags:x}, registered fd {_loop.IsRingFdRegistered}");
        WarmBothPaths();
    }

    /// <summary>
    /// Both variants complete through the same loop method, whose optimized code is compiled once from the profile of
    /// whatever ran while it was instrumented. Short alternating runs make that profile hold both call sites (as in a
    /// process that ran only one of them, e.g. BenchmarkDotNet's), so neither variant's completion call alone gets
    /// devirtualized and inlined.
    /// </summary>
    private void WarmBothPaths()
    {
        var watch = System.Diagnostics.Stopwatch.StartNew();
        while (watch.Elapsed < TimeSpan.FromMilliseconds(800))
        {
            _stream.Run(_loop, _internal, 2 * InFlight);
            _stream.Run(_loop, _custom, 2 * InFlight, checkValues: true);
        }
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _custom.Dispose();
        _loop.Schedule(static o => ((InternalNops)o!).Release(), _internal);
        _loop.Dispose();
    }

    [Benchmark(Baseline = true, OperationsPerInvoke = OperationsPerInvoke)]
    public void Internal() => _stream.Run(_loop, _internal, OperationsPerInvoke);

    [Benchmark(OperationsPerInvoke = OperationsPerInvoke)]
    public void Custom() => _stream.Run(_loop, _custom, OperationsPerInvoke, checkValues: true);
}

/// <summary>Something that submits one NOP carrying <c>value</c> from the loop thread.</summary>
internal interface INopSubmitter
{
    void SubmitNop(ulong value);
}

/// <summary>
/// The harness both variants share: counts NOPs to submit and to complete, draws a random 64-bit value per NOP
/// (xorshift) and sums the values submitted and received, and wakes the benchmark thread after the last completion.
/// </summary>
internal sealed class NopStream(int inFlight)
{
    private static readonly Action<object?> s_start = static s => ((NopStream)s!).Start();

    private readonly ManualResetEventSlim _done = new(false);
    private INopSubmitter? _submitter;
    private ulong _random = 0x9E3779B97F4A7C15;
    private int _toSubmit;
    private int _toComplete;
    private Exception? _fault;

    private ulong _submittedSum;
    private ulong _receivedSum;

    /// <summary>
    /// Benchmark thread: runs <paramref name="count"/> NOPs through <paramref name="submitter"/> and waits for them;
    /// with <paramref name="checkValues"/>, every value must have come back with its completion.
    /// </summary>
    public void Run(EventLoop loop, INopSubmitter submitter, int count, bool checkValues = false)
    {
        if (_toSubmit != 0 || _toComplete != 0)
        {
            throw new InvalidOperationException("The previous run has not finished.");
        }
        _submitter = submitter;
        _toSubmit = count;
        _toComplete = count;
        _submittedSum = 0;
        _receivedSum = 0;
        _done.Reset();
        loop.Schedule(s_start, this);
        if (!_done.Wait(30_000))
        {
            throw new TimeoutException($"{_toComplete} of {count} NOPs did not complete.");
        }
        if (_fault is not null)
        {
            throw new InvalidOperationException("A completion handler failed.", _fault);
        }
        if (checkValues && _submittedSum != _receivedSum)
        {
            throw new InvalidOperationException($"The values sent sum to 0x{_submittedSum:x}, the values received to 0x{_receivedSum:x}.");
        }
    }

    private void Start()
    {
        for (int i = 0; i < inFlight && TryNext(out ulong value); i++)
        {
            _submitter!.SubmitNop(value);
        }
    }

    /// <summary>Loop thread: the next NOP's value, or false when all NOPs of this run were submitted.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private bool TryNext(out ulong value)
    {
        if (_toSubmit == 0)
        {
            value = 0;
            return false;
        }
        _toSubmit--;
        ulong x = _random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        _random = x;
        _submittedSum += x;
        value = x;
        return true;
    }

    /// <summary>
    /// Loop thread: a NOP completed with <paramref name="result"/>, carrying <paramref name="value"/>. Returns true
    /// with the value of the next NOP to submit, if any.
    /// </summary>
    /// <remarks>
    /// Waking the benchmark thread is the last thing done with this object in a run: the woken thread may start the
    /// next run at once (it does when both threads share a CPU), and must not find this run still drawing values.
    /// </remarks>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public bool Complete(ulong value, int result, out ulong next)
    {
        if (result != 0)
        {
            Fail.Result(result);
        }
        _receivedSum += value;
        bool more = TryNext(out next);
        if (--_toComplete == 0)
        {
            _done.Set();
        }
        return more;
    }

    public void Fault(Exception exception)
    {
        _fault ??= exception;
        _done.Set();
    }
}

/// <summary>The internal way: an owner with an operation kind in user_data, no per-request value.</summary>
internal sealed unsafe class InternalNops(EventLoop loop, NopStream stream) : RingOwner(loop), INopSubmitter
{
    private const uint KindNop = 1;

    public void SubmitNop(ulong value)
    {
        // The value has nowhere to go: internal operations keep their state in the owner, not in user_data.
        io_uring_sqe* sqe = Loop.NewSqe(this, KindNop);
        sqe->opcode = IORING_OP_NOP;
    }

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        if (stream.Complete(0, result, out ulong next))
        {
            SubmitNop(next);
        }
    }
}

/// <summary>The public way: a <see cref="RingHandler"/> submitting a NOP with a 64-bit value.</summary>
internal sealed class CustomNops(EventLoop loop, NopStream stream) : RingHandler(loop), INopSubmitter
{
    private static readonly io_uring_sqe s_nop = new() { opcode = IORING_OP_NOP };

    public void SubmitNop(ulong value) => Submit(in s_nop, value);

    protected internal override void OnCompletion(ulong userValue, int result, uint flags)
    {
        if (stream.Complete(userValue, result, out ulong next))
        {
            SubmitNop(next);
        }
    }
}
