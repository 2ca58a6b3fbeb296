using System.Runtime.Versioning;
using IoUring.Interop;

namespace IoUring.Loops;

/// <summary>
/// Submits your own io_uring requests (any opcode) on an <see cref="EventLoop"/>'s ring; each completion comes back
/// with a 64-bit value of your choice. Subclass it and override <see cref="OnCompletion"/>.
/// </summary>
/// <remarks>
/// <para>Submit on the loop thread (<see cref="EventLoop.Schedule"/> gets there); requests go to the kernel with the
/// loop's next io_uring_enter.</para>
/// <para>Memory a request points to must stay valid (pinned or native) until its final completion, the one without
/// IORING_CQE_F_MORE. <see cref="OnCompletion"/> runs on the loop thread: keep it short.</para>
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
    // RS0022: RingOwner is public only as this base; its constructor is internal and it has no protected members.
#pragma warning disable RS0022
    protected RingHandler(EventLoop loop)
#pragma warning restore RS0022
        : base(loop ?? throw new ArgumentNullException(nameof(loop)))
    {
    }

    /// <summary>Queues <paramref name="sqe"/> on the loop's ring, replacing its user_data: <paramref name="userValue"/>
    /// comes back in <see cref="OnCompletion"/> for each of its completions. Loop thread only.</summary>
    /// <remarks>A linked chain goes to the kernel whole, in one io_uring_enter. In a chain longer than
    /// <see cref="EventLoopOptions.SubmissionQueueSize"/> the request that does not fit throws; those queued before it
    /// complete as a shorter chain.</remarks>
    /// <exception cref="InvalidOperationException">Off the loop thread, the loop is stopping, too many custom requests
    /// are in flight, or a linked chain does not fit in the submission queue.</exception>
    /// <exception cref="ObjectDisposedException">The handler was disposed.</exception>
    /// <exception cref="ArgumentException">The SQE has IOSQE_CQE_SKIP_SUCCESS, which would leave the request without a
    /// final completion.</exception>
    public unsafe void Submit(in io_uring_sqe sqe, ulong userValue)
    {
        EventLoop loop = Loop;
        // Non-short-circuit ORs: one branch on the hot path.
        if (!loop.IsOnLoopThread | IsReleased | loop.IsStopping
            | (sqe.flags & IoUringConstants.IOSQE_CQE_SKIP_SUCCESS) != 0)
        {
            ThrowSubmitError(sqe.flags);
        }
        // What can fail comes first: a taken SQE is submitted whatever it holds.
        loop.EnsureCustomValueSlot();
        io_uring_sqe* target = loop.NewRawSqe(this);
        // SAFETY: the caller keeps what the SQE points to valid until its final completion.
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
    /// <param name="flags">The CQE's flags (IORING_CQE_F_MORE: more completions follow).</param>
    // Internal too, so the loop calls it directly (guarded devirtualization can see the call).
    protected internal abstract void OnCompletion(ulong userValue, int result, uint flags);

    /// <summary>Called on the loop thread when <see cref="OnCompletion"/> threw. The default reports it to
    /// <see cref="EventLoopOptions.UnhandledException"/>.</summary>
    protected virtual void OnException(Exception exception) => Loop.ReportUnhandled(exception);

    /// <summary>Called on the loop thread after disposal, once nothing of this handler is in flight.</summary>
    protected virtual void OnReleased() { }

    /// <summary>Stops new submissions; the handler is released after its last in-flight request completes.</summary>
    public void Dispose()
    {
        GC.SuppressFinalize(this);
        if (Loop.IsOnLoopThread || Loop.Stopped.IsCompleted)
        {
            // Once the loop stopped nothing is in flight and no other thread touches the owner.
            Release();
        }
        else
        {
            Loop.Schedule(static o => ((RingHandler)o!).Release(), this);
        }
    }

    // Custom completions go straight to OnCompletion.
    internal sealed override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
        => throw new InvalidOperationException($"Unexpected operation kind {kind} for a ring handler.");

    internal sealed override void HandleException(Exception exception) => OnException(exception);

    internal sealed override void OnFreed() => OnReleased();
}
