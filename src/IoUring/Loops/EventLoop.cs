using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Rings;
using IoUring.Testing;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Loops;

/// <summary>
/// One io_uring and the dedicated thread that is its only submitter. Each iteration drains the completion
/// queue and dispatches every completion to its owner, runs work posted from other threads, then submits all
/// new requests and waits for the next completion in a single io_uring_enter.
/// </summary>
/// <remarks>
/// <para>Other threads never touch the ring: they <see cref="Schedule"/> work onto the loop. While the loop is
/// busy that costs them no system call; a sleeping loop is woken through an eventfd it keeps a READ armed on.</para>
/// <para>The loop is a <see cref="PipeScheduler"/>: pipe callbacks scheduled on it run on the loop thread.</para>
/// <para>Disposing stops the loop: everything in flight is cancelled, the loop waits for each request's final
/// completion, then closes every fd it opened and frees the memory it gave the kernel.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
public sealed unsafe partial class EventLoop : PipeScheduler, IDisposable
{
    private readonly EventLoopOptions _options;
    private readonly Ring _ring;
    private readonly Thread _thread;
    private readonly LoopRingOwner _loopRingOwner;
    private readonly ManualResetEventSlim _started = new();
    private ExceptionDispatchInfo? _startupError;
    private ReceiveBuffers? _receiveBuffers;
    // The loop thread's stack, [_stackLow, _stackLow + _stackSize): the thread test of every public entry point on the
    // hot path (see IsOnLoopThread). Size 0 while unknown or after the thread ended.
    private nuint _stackLow;
    private nuint _stackSize;
    // The loop running on this thread: the fallback test where the stack's range is unknown.
    [ThreadStatic]
    private static EventLoop? t_current;
    private int _liveOwners;
    private EventLoopCounters _counters;
    private long _handlerExceptions; // its counter: written from any thread
    private readonly string? _origin; // PoolDiagnostics only: where the loop was made, named in its pools' reports

    /// <summary>Creates the ring and starts the loop thread.</summary>
    /// <exception cref="ArgumentException">An option is invalid.</exception>
    /// <exception cref="IoUringUnavailableException">io_uring cannot be used here; the message names the
    /// cause.</exception>
    public EventLoop(EventLoopOptions? options = null)
    {
        _options = options ?? new EventLoopOptions();
        _options.Validate();
        if (PoolDiagnostics.Enabled)
        {
            _origin = BlockLedger.Format(new StackTrace(1, false));
        }
        _faults = _options.Hooks?.Faults;
        _deferredWake = new DeferredWake(this);

        // Created here so setup errors reach the caller; started disabled so the loop thread becomes the single issuer.
        _ring = Ring.Create(new RingOptions
        {
            SqEntries = (uint)_options.SubmissionQueueSize,
            CqEntries = (uint)_options.CompletionQueueSize,
            StartDisabled = true,
            RegisterRingFd = false,
            Hooks = _options.Hooks,
        });
        _ring.SuppressesIoWait = !_options.ReportIoWait && _ring.HasNoIoWait;
        _loopRingOwner = new LoopRingOwner(this);
        _thread = new Thread(Run) { IsBackground = true, Name = _options.ThreadName };
        _thread.UnsafeStart();
        _started.Wait();
        _started.Dispose();
        if (_startupError is not null)
        {
            _thread.Join();
            _startupError.Throw();
        }
    }

    /// <summary>The IORING_SETUP_* flags this loop's ring was set up with, after any fallback (R_DISABLED included: the
    /// loop thread enabled it).</summary>
    public uint SetupFlags => _ring.SetupFlags;

    /// <summary>Whether io_uring_enter uses the registered ring fd.</summary>
    public bool IsRingFdRegistered => _ring.IsRingFdRegistered;

    /// <summary>
    /// Whether the loop's waits for completions pass IORING_ENTER_NO_IOWAIT, so that its sleep with requests in flight
    /// counts as idle time rather than iowait: the kernel has it (6.15+) and
    /// <see cref="EventLoopOptions.ReportIoWait"/> is false.
    /// </summary>
    public bool SuppressesIoWait => _ring.SuppressesIoWait;

    /// <summary>Whether <see cref="IsOnLoopThread"/> tests by stack range (the loop thread's stack is known and it
    /// runs).</summary>
    internal bool KnowsThreadStack => _stackSize != 0;

    /// <summary>Whether the calling thread is this loop's thread.</summary>
    public bool IsOnLoopThread
    {
        get
        {
            // Threads' stacks never overlap, so an address on the caller's stack that lies in the loop thread's stack
            // means the caller is the loop thread. This costs a subtraction and a compare; a thread-static read is a
            // call into the runtime's TLS lookup on Linux, measurable on a custom NOP (docs/benchmarks.md,
            // "Ring core").
            nuint stackSize = _stackSize;
            if (stackSize != 0)
            {
                byte onThisStack;
                return (nuint)(&onThisStack) - _stackLow < stackSize;
            }
            return t_current == this;
        }
    }

    /// <summary>Counters of this loop's work so far (read without synchronization: a close approximation while
    /// running).</summary>
    public EventLoopCounters Counters => _counters with
    {
        // the loop's own buffer ring's, and its UDP sockets' own rings' (counted as they happen)
        BufferRingExhaustions = _counters.BufferRingExhaustions + (_receiveBuffers?.Exhaustions ?? 0),
        ReceiveBuffersLost = _receiveBuffers?.LostBuffers ?? 0,
        MemoryPoolRentedBytes = (_memoryPool is { } pool ? (long)pool.RentedBlocks * pool.BlockBytes : 0)
            + (_largeBlockPool is { } large ? (long)large.RentedBlocks * large.BlockBytes : 0),
        RegisteredMemoryBytes = _bufferTable?.RegisteredBytes ?? 0,
        ReceiveBufferBytes = _receiveBuffers?.MemoryBytes ?? 0,
        HandlerExceptions = Interlocked.Read(ref _handlerExceptions),
        Wakeups = Interlocked.Read(ref _wakeups),
        BytesSent = _counters.BytesSent + Interlocked.Read(ref _callerBytesSent),
        UdpDatagramsTruncated = _counters.UdpDatagramsTruncated + Interlocked.Read(ref _queuedDatagramsTruncated),
        CallerSends = Interlocked.Read(ref _callerSends),
    };

    /// <summary>The number of requests in flight on the ring (approximate when read off the loop thread).</summary>
    public int InFlight => Volatile.Read(ref _inFlight);

    internal Ring Ring => _ring;

    /// <summary>The options the loop was made with (validated; not to be changed).</summary>
    internal EventLoopOptions Options => _options;
    /// <summary>The loop's provided buffers for receives (registered when the loop starts, before the constructor
    /// returns; their memory is made at the first receive).</summary>
    internal ReceiveBuffers ReceiveBuffers => _receiveBuffers!;
    internal int RingSetupRefusals => _ring.RefusedSetupAttempts;

    // Owners' own receive buffers (UDP sockets'), published with the loop's before each submit. Loop thread only.
    private readonly List<ReceiveBuffers> _ownerReceiveBuffers = [];

    /// <summary>Makes <paramref name="buffers"/>, an owner's own group, published before each submit as the loop's are.
    /// Loop thread.</summary>
    internal void AddOwnerReceiveBuffers(ReceiveBuffers buffers) => _ownerReceiveBuffers.Add(buffers);

    /// <summary>Stops publishing <paramref name="buffers"/> (the owner disposes them). Loop thread.</summary>
    internal void RemoveOwnerReceiveBuffers(ReceiveBuffers buffers) => _ownerReceiveBuffers.Remove(buffers);

    /// <summary>Makes every buffer given back visible to the kernel: the loop's and its owners' own groups.</summary>
    private void PublishRecycledBuffers()
    {
        _receiveBuffers?.PublishRecycled();
        foreach (ReceiveBuffers buffers in _ownerReceiveBuffers)
        {
            buffers.PublishRecycled();
        }
    }
    internal int CustomSlotsInUse => _customValues.InUse;

    /// <summary>Owners whose GCHandle is allocated (the leak check of the tests: it returns to its baseline).</summary>
    internal int LiveOwners => Volatile.Read(ref _liveOwners);

    internal void OnOwnerCreated() => Interlocked.Increment(ref _liveOwners);

    internal void OnOwnerFreed() => Interlocked.Decrement(ref _liveOwners);

    /// <summary>A connection on this loop received <paramref name="count"/> bytes (for <see cref="Counters"/>). Loop
    /// thread.</summary>
    internal void OnBytesReceived(int count) => _counters.BytesReceived += count;

    /// <summary>A file read on this loop completed with <paramref name="bytes"/> (for <see cref="Counters"/>). Loop
    /// thread.</summary>
    internal void OnFileRead(int bytes)
    {
        _counters.FileReads++;
        _counters.FileBytesRead += bytes;
    }

    /// <summary>A connection on this loop sent <paramref name="count"/> bytes (for <see cref="Counters"/>). Loop
    /// thread.</summary>
    internal void OnBytesSent(int count) => _counters.BytesSent += count;

    /// <summary>A connection's flushing thread sent <paramref name="count"/> bytes itself (for <see cref="Counters"/>).
    /// Any thread.</summary>
    internal void OnCallerSend(int count)
    {
        Interlocked.Increment(ref _callerSends);
        Interlocked.Add(ref _callerBytesSent, count);
    }

    private long _callerSends;
    private long _callerBytesSent;

    /// <summary>The fault injector of the test hooks (null in production).</summary>
    internal FaultInjector? Faults => _faults;

    /// <summary>A connection on this loop made a zero-copy send (from a registered buffer:
    /// <paramref name="fixedBuffer"/>). Loop thread.</summary>
    internal void OnZeroCopySend(bool fixedBuffer)
    {
        _counters.ZeroCopySends++;
        _counters.ZeroCopySendsFixed += fixedBuffer ? 1 : 0;
    }

    /// <summary>A zero-copy notification said the kernel copied. Loop thread.</summary>
    internal void OnZeroCopySendCopied() => _counters.ZeroCopySendsCopied++;

    internal void ReportUnhandled(Exception exception)
    {
        // also called off the loop thread (posts after the stop, close signals)
        Interlocked.Increment(ref _handlerExceptions);
        try
        {
            _options.UnhandledException?.Invoke(exception);
        }
        catch (Exception)
        {
            // A faulty reporter must not kill the loop either.
        }
    }

    [Conditional("DEBUG")]
    internal void AssertOnLoopThread() => Debug.Assert(IsOnLoopThread, "ring access off the loop thread");

    internal void ThrowIfNotOnLoopThread()
    {
        if (!IsOnLoopThread)
        {
            throw new InvalidOperationException(
                "This must be called on the event loop's thread; use Schedule to get there.");
        }
    }

    // ---- the loop ----

    private void Run()
    {
        t_current = this;
        if (Libc.TryGetCurrentThreadStack(out nuint stackLow, out nuint stackSize))
        {
            _stackLow = stackLow;
            _stackSize = stackSize;
        }
        try
        {
            RunLoop();
        }
        finally
        {
            // A thread started later may be given this stack's memory (libc caches stacks): it must not pass the test.
            _stackSize = 0;
        }
    }

    private void RunLoop()
    {
        try
        {
            Start();
        }
        catch (Exception ex)
        {
            _startupError = ExceptionDispatchInfo.Capture(ex);
            ReleaseResources(drained: true);
            _stopped.TrySetResult();
            _started.Set();
            return;
        }
        _started.Set();

        try
        {
            while (!_stopping)
            {
                RunOnce();
            }
            DrainAfterStop();
            CollectReleasedNotifications();
        }
        catch (Exception ex)
        {
            // Only a broken ring gets here (enter failing with an unexpected errno, e.g. EBADR).
            ReportUnhandled(ex);
            StopAfterFailure();
        }
        // Pending notifications leave the receive buffers and the wakeup value alone: only the send memory they pin
        // stays held (by owners never freed) for the life of the process, since the kernel may still transmit from it.
        ReleaseResources(drained: _inFlight == _notificationsPending);
        _stopped.TrySetResult();
        // Work that raced with the stop still runs (so no continuation is lost); the ring is gone, so any ring
        // access in it throws ObjectDisposedException, which is reported.
        RunPostedWork();
    }

    private void Start()
    {
        if (_options.BatchScheduling)
        {
            // struct sched_param { int sched_priority; }: 0 for the non-realtime policies. RESET_ON_FORK: threads
            // started from the loop thread (the thread pool grows from whichever thread queues work) keep the normal
            // policy.
            int param = 0;
            if (Libc.sched_setscheduler(0, Libc.SCHED_BATCH | Libc.SCHED_RESET_ON_FORK, &param) == 0)
            {
                IsBatchScheduled = true;
            }
            else
            {
                BatchSchedulingError = Libc.GetLastErrno();
            }
        }
        _ring.Enable(_options.RegisterRingFd);
        _bufferTable = new RegisteredBufferTable(_ring, _options.Hooks?.BufferRegistrationErrno ?? 0,
            _options.Hooks?.BufferUnregistrationErrno ?? 0);
        _receiveBuffers = new ReceiveBuffers(_ring, _options.BufferCount, _options.BufferSize,
            _options.Hooks?.PoisonReturnedMemory ?? false, _origin);
        OpenWakeup();
    }

    /// <summary>
    /// Whether the loop thread runs under SCHED_BATCH: <see cref="EventLoopOptions.BatchScheduling"/> asked for it and
    /// the kernel allowed it. Set once the loop thread has started (before the constructor returns).
    /// </summary>
    public bool IsBatchScheduled { get; private set; }

    /// <summary>The errno with which the kernel refused SCHED_BATCH (e.g. EPERM under a seccomp filter), or
    /// 0.</summary>
    public int BatchSchedulingError { get; private set; }

    private void RunOnce()
    {
        DrainCompletions();
        RunPostedWork();
        if (_wakeupDisarmed && !_stopping)
        {
            ArmWakeup();
        }

        // Block for a completion unless stopping with nothing left to wait for.
        bool wait = (!_stopping || HasRequestsToWaitFor) && PrepareToSleep();
        PublishRecycledBuffers();
        SubmitAndWait(wait);
        if (wait)
        {
            AfterSleep();
        }
    }

    private void DrainCompletions()
    {
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
        // One try region for the whole completion path: the handler, then (final CQE) the owner's bookkeeping, which
        // may run owner code too (OnRequestFinished, OnFreed: a RingHandler's OnReleased). Nothing escapes to the loop.
        try
        {
            uint kind = UserData.Kind(userData);
            if (kind == UserData.CustomKind)
            {
                ulong value = _customValues.Get(UserData.Tag(userData), release: finalPending);
                // Every custom request's owner is a RingHandler (internal owners use kinds 1 to 7): one virtual call,
                // straight to it.
                Debug.Assert(owner is RingHandler);
                Unsafe.As<RingHandler>(owner).OnCompletion(value, result, flags);
            }
            else if ((flags & IORING_CQE_F_BUFFER) != 0)
            {
                // An internal receive that took one of the loop's buffers: its bytes, then the buffer goes back.
                (owner.OwnReceiveBuffers ?? _receiveBuffers!).Deliver(owner, kind, result, flags, userData);
            }
            else
            {
                owner.HandleCompletion(kind, result, flags, userData);
            }
            if (finalPending)
            {
                finalPending = false;
                _inFlight--;
                owner.OnFinalCompletion();
            }
        }
        catch (Exception ex)
        {
            OnDispatchException(owner, ex, finalPending);
        }
    }

    /// <summary>
    /// An owner threw while handling a completion: tell it, then count the request's end if that was still to come.
    /// Whatever the owner's hooks throw here is reported; the loop goes on.
    /// </summary>
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

    /// <summary>The loop's own requests: the eventfd wakeup READ and the stop's cancel-all.</summary>
    private sealed class LoopRingOwner(EventLoop loop) : RingOwner(loop)
    {
        public const uint KindWakeup = 1;
        public const uint KindCancel = 2;

        internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
        {
            if (kind == KindWakeup && !Loop._stopping)
            {
                Loop.ArmWakeup();
            }
        }
    }
}
