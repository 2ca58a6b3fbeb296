using System.Runtime.Versioning;
using IoUring.Interop;

namespace IoUring.Loops;

/// <summary>
/// Submits your own io_uring requests (any opcode) on an <see cref="EventLoop"/>'s ring and receives their
/// completions with a full 64-bit value of your choice. Subclass it and override <see cref="OnCompletion"/>.
/// </summary>
/// <remarks>
/// <para>Requests are submitted on the loop thread (use <see cref="EventLoop.Schedule"/> to get there) and go to the
/// kernel with the loop's next io_uring_enter, batched with everything else of that iteration.</para>
/// <para>Every byte of memory a request points to must stay valid until its final completion (the one without
/// IORING_CQE_F_MORE): pin it or use native memory. <see cref="OnCompletion"/> runs on the loop thread: keep it
/// short.</para>
/// <para>Dispose when done: no request can be submitted after that, and <see cref="OnReleased"/> runs once the last
/// one in flight has completed.</para>
/// </remarks>
/// <example>
/// <code>
/// sealed class Nops(EventLoop loop) : RingHandler(loop)
/// {
///     protected override void OnCompletion(ulong userValue, int result, uint flags) => Console.WriteLine(userValue);
/// }
/// var handler = new Nops(loop);
/// loop.Schedule(_ => handler.Submit(
///     new io_uring_sqe { opcode = IoUringConstants.IORING_OP_NOP }, 0xDEADBEEF_CAFEF00D), null);
/// </code>
/// </example>
[SupportedOSPlatform("linux")]
public abstract class RingHandler : RingOwner, IDisposable
{
    /// <summary>Binds the handler to <paramref name="loop"/>.</summary>
    // RS0022: RingOwner is public only as this class's base (its constructor is internal and it has no protected
    // members), so deriving from RingHandler exposes nothing of RingOwner's.
#pragma warning disable RS0022
    protected RingHandler(EventLoop loop)
#pragma warning restore RS0022
        : base(loop ?? throw new ArgumentNullException(nameof(loop)))
    {
    }

    /// <summary>
    /// Queues <paramref name="sqe"/> on the loop's ring. Its user_data is replaced: <paramref name="userValue"/> comes
    /// back in <see cref="OnCompletion"/> for every completion of this request. Loop thread only.
    /// </summary>
    /// <remarks>
    /// A linked chain (IOSQE_IO_LINK, IOSQE_IO_HARDLINK) goes to the kernel in one io_uring_enter: a full submission
    /// queue submits only the requests before the chain early. In a chain longer than
    /// <see cref="EventLoopOptions.SubmissionQueueSize"/> the request that does not fit is refused with
    /// <see cref="InvalidOperationException"/> (those already queued complete as a shorter chain).
    /// </remarks>
    /// <exception cref="InvalidOperationException">Called off the loop thread, the loop is stopping, too many custom
    /// requests are in flight, or a linked chain does not fit in the submission queue.</exception>
    /// <exception cref="ObjectDisposedException">The handler was disposed.</exception>
    /// <exception cref="ArgumentException">The SQE asks for IOSQE_CQE_SKIP_SUCCESS, which would leave the request
    /// without a final completion.</exception>
    public unsafe void Submit(in io_uring_sqe sqe, ulong userValue)
    {
        EventLoop loop = Loop;
        // One branch for all four checks: non-short-circuit ORs keep the hot path straight.
        if (!loop.IsOnLoopThread | IsReleased | loop.IsStopping
            | (sqe.flags & IoUringConstants.IOSQE_CQE_SKIP_SUCCESS) != 0)
        {
            ThrowSubmitError(sqe.flags);
        }
        // Whatever can fail comes before the SQE is taken (a taken SQE is submitted whatever it holds): a throw leaks
        // neither an SQE nor a value slot.
        loop.EnsureCustomValueSlot();
        io_uring_sqe* target = loop.NewRawSqe(this);
        // SAFETY: the caller keeps what the SQE points to valid until its final completion (see the remarks).
        *target = sqe; // all 64 bytes
        target->user_data = UserData.Encode(HandleBits, UserData.CustomKind, loop.RentCustomValueSlot(userValue));
    }

    private void ThrowSubmitError(byte sqeFlags)
    {
        Loop.ThrowIfNotOnLoopThread();
        ObjectDisposedException.ThrowIf(IsReleased, this);
        if (Loop.IsStopping)
        {
            throw new InvalidOperationException("The event loop is stopping; no new requests are accepted.");
        }
        if ((sqeFlags & IoUringConstants.IOSQE_CQE_SKIP_SUCCESS) != 0)
        {
            throw new ArgumentException(
                "IOSQE_CQE_SKIP_SUCCESS is not supported: every request needs a final completion so its memory and " +
                "handle can be released.", "sqe");
        }
    }

    /// <summary>Called on the loop thread for each completion of a request submitted through this handler.</summary>
    /// <param name="userValue">The value given to <see cref="Submit"/>.</param>
    /// <param name="result">The CQE's res: a result, or a negated errno (see <see cref="Errno"/>).</param>
    /// <param name="flags">The CQE's flags (IORING_CQE_F_MORE when more completions follow for this request).</param>
    // Internal too, so the loop calls it directly (a call site guarded devirtualization can see).
    protected internal abstract void OnCompletion(ulong userValue, int result, uint flags);

    /// <summary>Called on the loop thread when <see cref="OnCompletion"/> threw. The default reports it to
    /// <see cref="EventLoopOptions.UnhandledException"/>.</summary>
    protected virtual void OnException(Exception exception) => Loop.ReportUnhandled(exception);

    /// <summary>Called on the loop thread after disposal, once no request of this handler is in flight.</summary>
    protected virtual void OnReleased() { }

    /// <summary>Stops new submissions; the handler is released after its last in-flight request completes.</summary>
    public void Dispose()
    {
        GC.SuppressFinalize(this);
        if (Loop.IsOnLoopThread || Loop.Stopped.IsCompleted)
        {
            // After the loop stopped nothing is in flight and no other thread touches the owner.
            Release();
        }
        else
        {
            Loop.Schedule(static o => ((RingHandler)o!).Release(), this);
        }
    }

    // Custom completions are dispatched by the loop straight to OnCompletion; a handler submits nothing else.
    internal sealed override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
        => throw new InvalidOperationException($"Unexpected operation kind {kind} for a ring handler.");

    internal sealed override void HandleException(Exception exception) => OnException(exception);

    internal sealed override void OnFreed() => OnReleased();
}
