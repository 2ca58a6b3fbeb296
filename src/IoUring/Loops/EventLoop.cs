using System.Collections.Concurrent;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring;

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
public sealed unsafe partial class EventLoop : PipeScheduler, IDisposable
{
    private static readonly TimeSpan s_shutdownDeadline = TimeSpan.FromSeconds(10);
    private static int s_nextGroupId;

    private readonly EventLoopOptions _options;
    private readonly Ring _ring;
    private readonly Thread _thread;
    private readonly ConcurrentQueue<WorkItem> _posted = new();
    private CustomValueTable _customValues = new(); // mutable struct: never readonly
    private readonly LoopOwner _loopOwner;
    private readonly ManualResetEventSlim _started = new();
    private readonly TaskCompletionSource _stopped = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private ExceptionDispatchInfo? _startupError;

    private BufferRing? _bufferRing;
    private int _eventFd = -1;
    private int _wakersWriting;     // threads inside Wake (see ReleaseResources)
    private readonly DeferredWake _deferredWake;
    private ulong* _eventFdValue;   // the wakeup READ's 8-byte target; freed after the loop's last completion
    private int _sleeping;          // 1 while the loop is (about to be) blocked in io_uring_enter
    private int _stopRequested;
    private bool _stopping;         // loop thread's view: cancelling everything, refusing new requests
    private int _inFlight;          // requests submitted whose final CQE has not arrived
    private int _notificationsPending; // of those, zero-copy sends done with their fd whose notification is all that is left
    // The loop thread's stack, [_stackLow, _stackLow + _stackSize): the thread test of every public entry point on the
    // hot path (see IsOnLoopThread). Size 0 while unknown or after the thread ended.
    private nuint _stackLow;
    private nuint _stackSize;
    // The loop running on this thread: the fallback test where the stack's range is unknown.
    [ThreadStatic]
    private static EventLoop? t_current;
    private int _liveOwners;
    private EventLoopCounters _counters;

    /// <summary>Creates the ring and starts the loop thread.</summary>
    /// <exception cref="ArgumentException">An option is invalid.</exception>
    /// <exception cref="IoUringUnavailableException">io_uring cannot be used here; the message names the cause.</exception>
    public EventLoop(EventLoopOptions? options = null)
    {
        _options = options ?? new EventLoopOptions();
        _options.Validate();
        _deferredWake = new DeferredWake(this);

        // Created here so setup errors reach the caller; started disabled so the loop thread becomes the single issuer.
        _ring = Ring.Create(new RingOptions
        {
            SqEntries = (uint)_options.SubmissionQueueSize,
            CqEntries = (uint)_options.CompletionQueueSize,
            StartDisabled = true,
            RegisterRingFd = false,
            RefusedFlagsForTesting = _options.RefusedSetupFlagsForTesting,
            SetupErrnoForTesting = _options.SetupErrnoForTesting,
        });
        _loopOwner = new LoopOwner(this);
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

    /// <summary>The IORING_SETUP_* flags this loop's ring was set up with, after any fallback (R_DISABLED included: the loop thread enabled it).</summary>
    public uint SetupFlags => _ring.SetupFlags;

    /// <summary>Whether io_uring_enter uses the registered ring fd.</summary>
    public bool IsRingFdRegistered => _ring.IsRingFdRegistered;

    /// <summary>Whether <see cref="IsOnLoopThread"/> tests by stack range (the loop thread's stack is known and it runs).</summary>
    internal bool KnowsThreadStack => _stackSize != 0;

    /// <summary>Whether the calling thread is this loop's thread.</summary>
    public bool IsOnLoopThread
    {
        get
        {
            // Threads' stacks never overlap, so an address on the caller's stack that lies in the loop thread's stack
            // means the caller is the loop thread. This costs a subtraction and a compare; a thread-static read is a
            // call into the runtime's TLS lookup on Linux (about 2% of a custom NOP's cost, docs/benchmarks.md).
            nuint stackSize = _stackSize;
            if (stackSize != 0)
            {
                byte onThisStack;
                return (nuint)(&onThisStack) - _stackLow < stackSize;
            }
            return t_current == this;
        }
    }

    /// <summary>Completes when the loop thread has stopped and released everything.</summary>
    public Task Stopped => _stopped.Task;

    /// <summary>Counters of this loop's work so far (read without synchronization: a close approximation while running).</summary>
    public EventLoopCounters Counters => _counters;

    /// <summary>The number of requests in flight on the ring (approximate when read off the loop thread).</summary>
    public int InFlight => Volatile.Read(ref _inFlight);

    internal Ring Ring => _ring;
    internal BufferRing BufferRing => _bufferRing!;
    internal bool IsStopping => _stopping;
    internal int RingSetupRefusals => _ring.RefusedSetupAttempts;
    internal int CustomSlotsInUse => _customValues.InUse;

    /// <summary>Runs <paramref name="action"/> on the loop thread. Safe from any thread; never runs it inline.</summary>
    /// <remarks>
    /// Once the loop has stopped (see <see cref="Stopped"/>) the action runs on the thread pool instead, and does not
    /// throw here: this is the loop's <see cref="PipeScheduler"/> entry point, which pipes call from the application's
    /// calls (completing a pipe, say) and which must not throw at them. Ring access from such an action throws
    /// <see cref="ObjectDisposedException"/> (a <see cref="RingHandler"/>'s Submit, <see cref="InvalidOperationException"/>:
    /// not on the loop thread), which is reported to <see cref="EventLoopOptions.UnhandledException"/>.
    /// </remarks>
    public override void Schedule(Action<object?> action, object? state)
    {
        ArgumentNullException.ThrowIfNull(action);
        _posted.Enqueue(new WorkItem(action, state));
        if (_stopped.Task.IsCompleted)
        {
            // The loop stopped (maybe between the enqueue and this check, after its last look at the queue): run it
            // elsewhere, as the loop would have (it finds the ring gone), so nothing is lost.
            System.Threading.ThreadPool.UnsafeQueueUserWorkItem(static loop => loop.RunPostedWork(), this, preferLocal: false);
            return;
        }
        // Dekker pairing with the loop's sleep check: the enqueue above is a full fence, the loop publishes
        // _sleeping with Interchange before re-checking the queue; one of the two sides sees the other.
        if (Volatile.Read(ref _sleeping) != 0 && Interlocked.Exchange(ref _sleeping, 0) != 0)
        {
            if (Thread.CurrentThread.IsThreadPoolThread)
            {
                // Wake it after the work already queued on the thread pool, not now: an application thread flushing
                // responses (16 pipelined ones, or one per connection of a loop's batch) would otherwise wake the loop
                // at the first flush (on a busy CPU the woken loop preempts it) and it would send them one by one.
                // Later posters find _sleeping cleared, so one wake serves the whole batch (like Kestrel's IOQueue).
                System.Threading.ThreadPool.UnsafeQueueUserWorkItem(_deferredWake, preferLocal: false);
            }
            else
            {
                Wake();
            }
        }
    }

    /// <summary>As <see cref="Schedule"/>, for callers that must know the loop is gone rather than run the action elsewhere.</summary>
    /// <exception cref="ObjectDisposedException">The loop has stopped.</exception>
    internal void Post(Action<object?> action, object? state)
    {
        if (_stopped.Task.IsCompleted)
        {
            throw new ObjectDisposedException(nameof(EventLoop), "The event loop has stopped.");
        }
        Schedule(action, state);
    }

    /// <summary>Stops the loop and waits for it: see the class remarks. Safe to call more than once.</summary>
    public void Dispose()
    {
        RequestStop();
        if (!IsOnLoopThread)
        {
            _thread.Join();
        }
    }

    /// <summary>Asks the loop to stop; <see cref="Stopped"/> completes when it has.</summary>
    public Task StopAsync()
    {
        RequestStop();
        return _stopped.Task;
    }

    private void RequestStop()
    {
        if (Interlocked.Exchange(ref _stopRequested, 1) == 0 && !_stopped.Task.IsCompleted)
        {
            try
            {
                Post(static s => ((EventLoop)s!).BeginStop(), this);
            }
            catch (ObjectDisposedException)
            {
                // It stopped by itself in the meantime.
            }
        }
    }

    // A reusable thread-pool work item (a lambda with state would allocate one per wake). At most one is queued.
    private sealed class DeferredWake(EventLoop loop) : IThreadPoolWorkItem
    {
        public void Execute() => loop.Wake();
    }

    private void Wake()
    {
        // Counted in, so the loop's teardown never closes the eventfd (whose number could then be reused) under a write.
        Interlocked.Increment(ref _wakersWriting);
        int fd = Volatile.Read(ref _eventFd);
        if (fd >= 0)
        {
            ulong one = 1;
            _ = Libc.write(fd, &one, sizeof(ulong));
            _counters.Wakeups++;
        }
        Interlocked.Decrement(ref _wakersWriting);
    }

    // ---- loop-thread API used by owners ----

    /// <summary>
    /// A zeroed SQE for a request of <paramref name="owner"/>, with user_data set and the request counted in
    /// flight. If the SQ is full, queued SQEs are submitted first. Loop thread only.
    /// </summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal io_uring_sqe* GetSqe(RingOwner owner, uint kind, uint slot = 0)
    {
        io_uring_sqe* sqe = GetSqeUncleared(owner, kind, slot);
        ulong userData = sqe->user_data;
        *sqe = default;
        sqe->user_data = userData;
        return sqe;
    }

    /// <summary>As <see cref="GetSqe"/>, but the SQE keeps old contents besides user_data: the caller writes all of it.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal io_uring_sqe* GetSqeUncleared(RingOwner owner, uint kind, uint slot = 0)
    {
        io_uring_sqe* sqe = TakeSqe(owner);
        sqe->user_data = UserData.Encode(owner.HandleBits, kind, slot);
        return sqe;
    }

    /// <summary>As <see cref="GetSqeUncleared"/>, but user_data too is left to the caller, who writes the whole SQE.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    internal io_uring_sqe* TakeSqe(RingOwner owner)
    {
        AssertOnLoopThread();
        ObjectDisposedException.ThrowIf(_ring.IsDisposed, this);
        io_uring_sqe* sqe = _ring.TryGetSqeUncleared();
        if (sqe == null)
        {
            sqe = GetSqeAfterSubmit();
        }
        owner.OnSubmitted();
        _inFlight++;
        _counters.Sqes++;
        return sqe;
    }

    /// <summary>
    /// The SQ is full in the middle of an iteration: submit what is queued so far, as the end of the iteration would
    /// (recycled buffers published first, so the receives among them can use them). A linked chain still open at the
    /// tail stays queued: links do not span io_uring_enter calls, so submitting part of it would split it.
    /// </summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    private io_uring_sqe* GetSqeAfterSubmit()
    {
        uint openChain = OpenChainLength();
        if (openChain == _ring.SqEntries)
        {
            // The whole SQ is one open chain: end it at its last queued request and submit it as a shorter chain, so
            // that the requests taken after this refusal (the loop's own: receives, closes) do not join it or find the
            // SQ still full.
            _ring.UnpublishedSqe(openChain - 1)->flags &= unchecked((byte)~(IOSQE_IO_LINK | IOSQE_IO_HARDLINK));
            _bufferRing?.Publish();
            SubmitAndWait(wait: false);
            throw new InvalidOperationException(
                $"A linked chain (IOSQE_IO_LINK/IOSQE_IO_HARDLINK) longer than the submission queue ({_ring.SqEntries} entries) cannot " +
                $"go to the kernel whole; raise {nameof(EventLoopOptions.SubmissionQueueSize)} or shorten the chain.");
        }
        _bufferRing?.Publish();
        SubmitAndWait(wait: false, holdBack: openChain);
        io_uring_sqe* sqe = _ring.TryGetSqeUncleared();
        if (sqe == null)
        {
            throw new InvalidOperationException("The submission queue stays full after io_uring_enter.");
        }
        return sqe;
    }

    /// <summary>The number of queued SQEs at the tail that belong to a chain whose last link is still to come.</summary>
    private uint OpenChainLength()
    {
        uint count = _ring.UnpublishedCount;
        uint start = count;
        while (start > 0 && (_ring.UnpublishedSqe(start - 1)->flags & (IOSQE_IO_LINK | IOSQE_IO_HARDLINK)) != 0)
        {
            start--;
        }
        return count - start;
    }

    /// <summary>Makes sure <see cref="RentCustomSlot"/> cannot fail; throws if too many custom requests are in flight.</summary>
    internal void EnsureCustomSlot() => _customValues.EnsureFreeSlot();

    /// <summary>The slot of a custom request's value; after <see cref="EnsureCustomSlot"/>, never throws.</summary>
    internal uint RentCustomSlot(ulong value) => _customValues.Rent(value);

    internal void CountBufferRingExhaustion() => _counters.BufferRingExhaustions++;

    /// <summary>A zero-copy send's result arrived and only its notification is in flight: a stop does not wait for it.</summary>
    internal void OnNotificationPending() => _notificationsPending++;

    internal void OnNotificationArrived() => _notificationsPending--;

    /// <summary>Zero-copy notifications outstanding (requests that hold only memory, not an fd).</summary>
    internal int NotificationsPending => Volatile.Read(ref _notificationsPending);

    /// <summary>Owners whose GCHandle is allocated (the leak check of the tests: it returns to its baseline).</summary>
    internal int LiveOwners => Volatile.Read(ref _liveOwners);

    internal void OnOwnerCreated() => Interlocked.Increment(ref _liveOwners);

    internal void OnOwnerFreed() => Interlocked.Decrement(ref _liveOwners);

    internal void ReportUnhandled(Exception exception)
    {
        _counters.HandlerExceptions++;
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
            throw new InvalidOperationException("This must be called on the event loop's thread; use Schedule to get there.");
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
            while (!_stopping || ((_inFlight > _notificationsPending || !_posted.IsEmpty) && !ShutdownDeadlinePassed))
            {
                RunOnce();
            }
            if (_notificationsPending > 0)
            {
                // Notifications are not waited for: one may come only when a peer acknowledges or goes away. Those
                // the final closes released (an aborted socket drops its data at once) are collected by one more pass.
                SubmitAndWait(wait: false);
                DrainCompletions();
            }
        }
        catch (Exception ex)
        {
            // Only a broken ring gets here (enter failing with an unexpected errno, e.g. EBADR).
            ReportUnhandled(ex);
            StopAfterFailure();
        }
        // Pending notifications leave the buffer ring and the wakeup value alone: only the send memory they pin stays
        // held (by owners never freed) for the life of the process, since the kernel may still transmit from it.
        ReleaseResources(drained: _inFlight == _notificationsPending);
        _stopped.TrySetResult();
        // Work that raced with the stop still runs (so no continuation is lost); the ring is gone, so any ring
        // access in it throws ObjectDisposedException, which is reported.
        RunPostedWork();
    }

    /// <summary>
    /// Leaving on a failure: stop as <see cref="BeginStop"/> does (owners close their fds, everything is cancelled and
    /// drained within the deadline) as far as the ring still works; if it fails again, give up (the ring is closed
    /// after this, which makes the kernel cancel what is left).
    /// </summary>
    private void StopAfterFailure()
    {
        try
        {
            BeginStop();
            while ((_inFlight > _notificationsPending || !_posted.IsEmpty) && !ShutdownDeadlinePassed)
            {
                RunOnce();
            }
        }
        catch (Exception ex)
        {
            ReportUnhandled(ex);
        }
    }

    private void Start()
    {
        if (_options.BatchScheduling)
        {
            // struct sched_param { int sched_priority; }: 0 for the non-realtime policies. RESET_ON_FORK: threads started
            // from the loop thread (the thread pool grows from whichever thread queues work) keep the normal policy.
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
        ushort groupId = (ushort)Interlocked.Increment(ref s_nextGroupId);
        _bufferRing = new BufferRing(_ring, groupId, _options.BufferCount, _options.BufferSize);
        _eventFd = Libc.eventfd(0, Libc.EFD_CLOEXEC | Libc.EFD_NONBLOCK);
        if (_eventFd < 0)
        {
            throw IoUringException.FromErrno("eventfd", Libc.GetLastErrno());
        }
        _eventFdValue = (ulong*)NativeMemory.Alloc(sizeof(ulong));
        ArmWakeup();
    }

    /// <summary>
    /// Whether the loop thread runs under SCHED_BATCH: <see cref="EventLoopOptions.BatchScheduling"/> asked for it and
    /// the kernel allowed it. Set once the loop thread has started (before the constructor returns).
    /// </summary>
    public bool IsBatchScheduled { get; private set; }

    /// <summary>The errno with which the kernel refused SCHED_BATCH (e.g. EPERM under a seccomp filter), or 0.</summary>
    public int BatchSchedulingError { get; private set; }

    private void ArmWakeup()
    {
        io_uring_sqe* sqe = GetSqe(_loopOwner, LoopOwner.KindWakeup);
        sqe->opcode = IORING_OP_READ;
        sqe->fd = _eventFd;
        sqe->addr = (ulong)_eventFdValue;
        sqe->len = sizeof(ulong);
        sqe->off = ulong.MaxValue; // read at the current position (eventfd has none)
    }

    private void RunOnce()
    {
        DrainCompletions();
        RunPostedWork();

        // Block for a completion unless stopping with nothing left in flight.
        bool wait = !_stopping || _inFlight > _notificationsPending;
        if (wait)
        {
            // Announce the sleep, then re-check: a poster either sees _sleeping and wakes us, or we see its item.
            Interlocked.Exchange(ref _sleeping, 1);
            if (!_posted.IsEmpty)
            {
                Volatile.Write(ref _sleeping, 0);
                wait = false;
            }
        }
        _bufferRing!.Publish();
        SubmitAndWait(wait);
        if (wait)
        {
            Volatile.Write(ref _sleeping, 0);
        }
    }

    /// <param name="wait">Block for a completion.</param>
    /// <param name="holdBack">SQEs at the tail to leave queued for a later submit.</param>
    private void SubmitAndWait(bool wait, uint holdBack = 0)
    {
        __kernel_timespec timeout = new() { tv_nsec = 100_000_000 };
        // While stopping, bound each wait so the shutdown deadline is checked.
        FaultInjector? faults = _options.FaultsForTesting;
        int result;
        if (faults is not null && faults.TakeEnterFailure() is int injected and not 0)
        {
            result = -injected;
        }
        else
        {
            faults?.Apply(_ring);
            result = _ring.Enter(wait ? 1u : 0u, wait && _stopping ? &timeout : null, holdBack);
        }
        _counters.Syscalls++;
        if (result >= 0 || result is -Errno.EINTR or -Errno.ETIME)
        {
            if (_ring.HasCqOverflow)
            {
                _counters.CqOverflows++;
            }
            return;
        }
        switch (-result)
        {
            case Errno.EBUSY:
            case Errno.EAGAIN:
                // The kernel has completions it cannot post until we drain the CQ; the next iteration does.
                _counters.CqOverflows++;
                return;
            case Errno.EBADR:
                throw new IoUringException("io_uring dropped completions (EBADR): the CQ overflowed and the kernel could not keep them.", Errno.EBADR);
            default:
                throw IoUringException.FromErrno("io_uring_enter", -result);
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
                ulong value = _customValues.Get(UserData.Slot(userData), release: finalPending);
                // Every custom request's owner is a RingHandler (internal owners use kinds 1 to 7): one virtual call, straight to it.
                Debug.Assert(owner is RingHandler);
                Unsafe.As<RingHandler>(owner).OnCompletion(value, result, flags);
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

    private void RunPostedWork()
    {
        // Bounded so a stream of posts cannot starve completions.
        int count = _posted.Count;
        while (count-- > 0 && _posted.TryDequeue(out WorkItem item))
        {
            try
            {
                item.Action(item.State);
            }
            catch (Exception ex)
            {
                ReportUnhandled(ex);
            }
        }
    }

    private void BeginStop()
    {
        if (_stopping)
        {
            return;
        }
        _stopping = true;
        _shutdownStarted = Stopwatch.GetTimestamp();
        try
        {
            Stopping?.Invoke();
        }
        catch (Exception ex)
        {
            ReportUnhandled(ex); // the cancel below must still go out, or the stop waits for its deadline
        }
        // Cancel every request on the ring (including the wakeup READ); each still posts its final CQE.
        io_uring_sqe* sqe = GetSqe(_loopOwner, LoopOwner.KindCancel);
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->cancel_flags = IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL;
    }

    private long _shutdownStarted;

    /// <summary>Raised on the loop thread when it starts stopping, before everything is cancelled.</summary>
    internal event Action? Stopping;

    private void ReleaseResources(bool drained)
    {
        if (!drained)
        {
            // Requests still in flight may write into the buffer ring or the wakeup value: leak them rather than
            // free memory the kernel may still use. Closing the ring below makes the kernel cancel them.
            ReportUnhandled(new IoUringException($"The event loop stopped with {_inFlight} requests still in flight; their memory is kept.", Errno.EBUSY));
        }
        else
        {
            _bufferRing?.Dispose();
            if (_eventFdValue != null)
            {
                NativeMemory.Free(_eventFdValue);
                _eventFdValue = null;
            }
        }
        _loopOwner.Release();
        int eventFd = Interlocked.Exchange(ref _eventFd, -1);
        if (eventFd >= 0)
        {
            SpinWait spin = default;
            while (Volatile.Read(ref _wakersWriting) != 0)
            {
                spin.SpinOnce(); // a write in progress finishes in microseconds
            }
            _ = Libc.close(eventFd);
        }
        _ring.Dispose();
    }

    private bool ShutdownDeadlinePassed => _stopping && Stopwatch.GetElapsedTime(_shutdownStarted) > s_shutdownDeadline;

    private readonly record struct WorkItem(Action<object?> Action, object? State);

    /// <summary>The loop's own requests: the eventfd wakeup READ and the shutdown cancel.</summary>
    private sealed class LoopOwner(EventLoop loop) : RingOwner(loop)
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
