using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Rings;
using IoUring.Testing;

namespace IoUring.Loops;

/// <summary>
/// One io_uring and the dedicated thread that is its only submitter. Each iteration dispatches the completions, runs
/// work posted from other threads, then submits and waits in one io_uring_enter.
/// </summary>
/// <remarks>
/// <para>Other threads never touch the ring: they <see cref="Schedule"/> work onto the loop (it is a
/// <see cref="PipeScheduler"/>). That costs no system call unless the loop sleeps.</para>
/// <para>Disposing cancels everything in flight, waits for the final completions, then closes the loop's fds and
/// frees its memory.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
public sealed unsafe partial class EventLoop : PipeScheduler, IDisposable
{
    private readonly EventLoopOptions _options;
    private readonly Ring _ring;
    private readonly Thread _thread;
    private readonly LoopRingOwner _loopRingOwner;
    private readonly LoopMemory _memory;
    private readonly PostedWork _posted;
    private readonly FileReadPool _fileReadPool;
    private bool _wakeupDisarmed; // see ArmWakeup
    private const long DisarmedSleep = 10_000_000; // ns
    private readonly ManualResetEventSlim _started = new();
    private ExceptionDispatchInfo? _startupError;
    private ReceiveBuffers? _receiveBuffers;
    // For IsOnLoopThread; size 0 while unknown or ended.
    private nuint _stackLow;
    private nuint _stackSize;
    [ThreadStatic]
    private static EventLoop? t_current;
    private int _liveOwners;
    private EventLoopCounters _counters;
    private long _handlerExceptions; // written from any thread: Interlocked
    private long _callerSends;
    private long _callerBytesSent;
    private long _queuedDatagramsTruncated;
    private readonly string? _origin; // PoolDiagnostics only: where the loop was made

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
        _posted = new PostedWork(ReportUnhandled);
        _fileReadPool = new FileReadPool(this);
        _memory = new LoopMemory(this, _options.MemoryBlockSize, _options.Hooks?.PoisonReturnedMemory ?? false,
            _origin);

        // Created here so setup errors reach the caller; started disabled so the loop thread is the single issuer.
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

    /// <summary>The IORING_SETUP_* flags of the ring, after any fallback (R_DISABLED included).</summary>
    public uint SetupFlags => _ring.SetupFlags;

    /// <summary>Whether io_uring_enter uses the registered ring fd.</summary>
    public bool IsRingFdRegistered => _ring.IsRingFdRegistered;

    /// <summary>Whether waits pass IORING_ENTER_NO_IOWAIT (kernel 6.15+, <see cref="EventLoopOptions.ReportIoWait"/>
    /// false), so sleeping with requests in flight counts as idle, not iowait.</summary>
    public bool SuppressesIoWait => _ring.SuppressesIoWait;

    internal bool KnowsThreadStack => _stackSize != 0;

    /// <summary>Whether the calling thread is this loop's thread.</summary>
    public bool IsOnLoopThread
    {
        get
        {
            // Stacks never overlap; cheaper than the thread-static (a TLS lookup call on Linux).
            nuint stackSize = _stackSize;
            if (stackSize != 0)
            {
                byte onThisStack;
                return (nuint)(&onThisStack) - _stackLow < stackSize;
            }
            return t_current == this;
        }
    }

    /// <summary>Counters of this loop's work so far; read without synchronization, so approximate while
    /// running.</summary>
    public EventLoopCounters Counters => _counters with
    {
        BufferRingExhaustions = _counters.BufferRingExhaustions + (_receiveBuffers?.Exhaustions ?? 0),
        ReceiveBuffersLost = _receiveBuffers?.LostBuffers ?? 0,
        MemoryPoolRentedBytes = _memory.RentedBytes,
        RegisteredMemoryBytes = _memory.RegisteredBytes,
        ReceiveBufferBytes = _receiveBuffers?.MemoryBytes ?? 0,
        HandlerExceptions = Interlocked.Read(ref _handlerExceptions),
        Wakeups = _posted.Wakes,
        BytesSent = _counters.BytesSent + Interlocked.Read(ref _callerBytesSent),
        UdpDatagramsTruncated = _counters.UdpDatagramsTruncated + Interlocked.Read(ref _queuedDatagramsTruncated),
        CallerSends = Interlocked.Read(ref _callerSends),
    };

    /// <summary>Requests in flight on the ring; approximate off the loop thread.</summary>
    public int InFlight => Volatile.Read(ref _inFlight);

    internal Ring Ring => _ring;

    internal EventLoopOptions Options => _options;
    // Set before the constructor returns.
    internal ReceiveBuffers ReceiveBuffers => _receiveBuffers!;
    internal int RingSetupRefusals => _ring.RefusedSetupAttempts;

    // UDP sockets' own buffer rings.
    private readonly List<ReceiveBuffers> _ownerReceiveBuffers = [];

    internal void AddOwnerReceiveBuffers(ReceiveBuffers buffers)
    {
        AssertOnLoopThread();
        _ownerReceiveBuffers.Add(buffers);
    }

    internal void RemoveOwnerReceiveBuffers(ReceiveBuffers buffers)
    {
        AssertOnLoopThread();
        bool removed = _ownerReceiveBuffers.Remove(buffers);
        Debug.Assert(removed, "an owner's buffers are removed once, after they were added");
    }

    private void PublishRecycledBuffers()
    {
        AssertOnLoopThread();
        _receiveBuffers?.PublishRecycled();
        foreach (ReceiveBuffers buffers in _ownerReceiveBuffers)
        {
            buffers.PublishRecycled();
        }
    }
    internal int CustomSlotsInUse => _customValues.InUse;

    /// <summary>Owners whose GCHandle is allocated: the tests' leak check.</summary>
    internal int LiveOwners => Volatile.Read(ref _liveOwners);

    internal void OnOwnerCreated() => Interlocked.Increment(ref _liveOwners);

    internal void OnOwnerFreed() => Interlocked.Decrement(ref _liveOwners);

    // ---- counting ----

    internal void OnBytesReceived(int count) => Count().BytesReceived += count;

    internal void OnBytesSent(int count) => Count().BytesSent += count;

    internal void OnCallerSend(int count)
    {
        Interlocked.Increment(ref _callerSends);
        Interlocked.Add(ref _callerBytesSent, count);
    }

    internal void OnFileRead(int bytes)
    {
        Count().FileReads++;
        _counters.FileBytesRead += bytes;
    }

    internal void OnZeroCopySend(bool fixedBuffer)
    {
        Count().ZeroCopySends++;
        _counters.ZeroCopySendsFixed += fixedBuffer ? 1 : 0;
    }

    internal void OnZeroCopySendCopied() => Count().ZeroCopySendsCopied++;

    internal void OnDatagramReceived(int bytes)
    {
        Count().UdpDatagramsReceived++;
        _counters.UdpBytesReceived += bytes;
    }

    internal void OnDatagramsSent(int datagrams, int bytes)
    {
        Count().UdpDatagramsSent += datagrams;
        _counters.UdpBytesSent += bytes;
    }

    internal void OnDatagramDropped() => Count().UdpDatagramsDropped++;

    /// <summary>Cut on the loop, into a waiting receive or batch.</summary>
    internal void OnDatagramTruncated() => Count().UdpDatagramsTruncated++;

    /// <summary>Cut, taken from a socket's queue on the receiving thread.</summary>
    internal void OnQueuedDatagramTruncated() => Interlocked.Increment(ref _queuedDatagramsTruncated);

    internal void OnSegmentOffload() => Count().UdpSegmentOffloads++;

    internal void OnOwnerBuffersExhausted() => Count().BufferRingExhaustions++;

    internal void OnCoalescedReceive() => Count().UdpCoalescedReceives++;

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    private ref EventLoopCounters Count()
    {
        AssertOnLoopThread();
        return ref _counters;
    }

    internal FaultInjector? Faults => _faults;

    internal void ReportUnhandled(Exception exception)
    {
        // any thread (posts after the stop, close signals)
        Interlocked.Increment(ref _handlerExceptions);
        try
        {
            _options.UnhandledException?.Invoke(exception);
        }
        catch (Exception)
        {
            // A throwing reporter must not kill the loop.
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
            // libc reuses stacks: a later thread on this memory must not pass IsOnLoopThread.
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
            // Only a broken ring gets here (enter failed, e.g. EBADR).
            ReportUnhandled(ex);
            StopAfterFailure();
        }
        // Pending notifications count as drained: they pin only send memory, which _memory keeps.
        ReleaseResources(drained: _inFlight == _notificationsPending);
        _stopped.TrySetResult();
        // Work that raced with the stop still runs; ring access in it throws and is reported.
        _posted.Run();
    }

    private void Start()
    {
        if (_options.BatchScheduling)
        {
            // sched_priority is 0 for non-realtime policies. RESET_ON_FORK: threads started from the loop thread
            // (the thread pool grows from it) keep the normal policy.
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
        _memory.OpenTable(_ring, _options.Hooks?.BufferRegistrationErrno ?? 0,
            _options.Hooks?.BufferUnregistrationErrno ?? 0);
        _receiveBuffers = new ReceiveBuffers(_ring, _options.BufferCount, _options.BufferSize,
            _options.Hooks?.PoisonReturnedMemory ?? false, _origin);
        _posted.Open();
        ArmWakeup();
    }

    /// <summary>Whether the loop thread runs under SCHED_BATCH (<see cref="EventLoopOptions.BatchScheduling"/>, and the
    /// kernel allowed it).</summary>
    public bool IsBatchScheduled { get; private set; }

    /// <summary>The errno with which the kernel refused SCHED_BATCH (e.g. EPERM under seccomp), or 0.</summary>
    public int BatchSchedulingError { get; private set; }

    private void RunOnce()
    {
        AssertOnLoopThread();
        DrainCompletions();
        _posted.Run();
        if (_wakeupDisarmed && !_stopping)
        {
            ArmWakeup();
        }

        bool wait = (!_stopping || HasRequestsToWaitFor) && _posted.TryBeginSleep();
        PublishRecycledBuffers();
        SubmitAndWait(wait);
        if (wait)
        {
            _posted.EndSleep();
        }
    }

    // ---- work from other threads ----

    /// <summary>Runs <paramref name="action"/> on the loop thread, never inline. Safe from any thread.</summary>
    /// <remarks>Once the loop has stopped the action runs on the thread pool instead, without throwing; ring access
    /// there throws and is reported to <see cref="EventLoopOptions.UnhandledException"/>.</remarks>
    public override void Schedule(Action<object?> action, object? state)
    {
        ArgumentNullException.ThrowIfNull(action);
        _posted.Post(action, state);
        if (_stopped.Task.IsCompleted)
        {
            // The loop may have looked at its queue for the last time: run it elsewhere.
            System.Threading.ThreadPool.UnsafeQueueUserWorkItem(static loop => loop._posted.Run(), this, false);
        }
    }

    /// <summary>As <see cref="Schedule"/>, but throws <see cref="ObjectDisposedException"/> once the loop has
    /// stopped.</summary>
    internal void Post(Action<object?> action, object? state)
    {
        if (_stopped.Task.IsCompleted)
        {
            throw new ObjectDisposedException(nameof(EventLoop), "The event loop has stopped.");
        }
        Schedule(action, state);
    }

    /// <summary>As <see cref="Post"/>, waking the loop at once even from a thread-pool thread, for a caller that
    /// blocks on the work. Not for hot paths.</summary>
    internal void PostAndWake(Action<object?> action, object? state)
    {
        Post(action, state);
        _posted.Wake();
    }

    /// <summary>A hint: work posted now costs a wake-up.</summary>
    internal bool IsSleeping => _posted.IsSleeping;

    private bool HasPostedWork => !_posted.IsEmpty;
}
