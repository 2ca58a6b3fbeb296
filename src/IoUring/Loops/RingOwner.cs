using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;

namespace IoUring.Loops;

/// <summary>
/// Anything that submits requests on a loop's ring and receives their completions: a connection, a listener, a
/// <see cref="RingHandler"/>. Its GCHandle is freed only once the owner was released and its last request's final CQE
/// arrived, so a handle value in flight in the kernel never names another owner.
/// </summary>
/// <remarks>
/// <para>All members but the constructor run on the loop thread.</para>
/// <para>Public only as <see cref="RingHandler"/>'s base; its constructor is internal, so only this library derives
/// from it.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
public abstract class RingOwner
{
    private GCHandle<RingOwner> _handle;
    private readonly ulong _handleBits;
    private int _inFlight;
    private bool _released;

    internal RingOwner(EventLoop loop)
    {
        Loop = loop;
        _handle = new GCHandle<RingOwner>(this);
        nint value = GCHandle<RingOwner>.ToIntPtr(_handle);
        if (!UserData.FitsHandle(value))
        {
            _handle.Dispose();
            throw new PlatformNotSupportedException(
                $"GCHandle value 0x{value:x} leaves no room for the operation kind and tag bits of user_data.");
        }
        _handleBits = (ulong)value;
        loop.OnOwnerCreated();
    }

    /// <summary>The loop this owner submits on.</summary>
    public EventLoop Loop { get; }

    /// <summary>Requests submitted whose final CQE has not arrived yet.</summary>
    public int InFlight => _inFlight;

    internal bool IsReleased => _released;

    internal ulong HandleBits => _handleBits;

    /// <summary>The buffers this owner's receives select from instead of the loop's (a UDP socket's own group, sized
    /// for whole datagrams); their completions reach <see cref="HandleReceive"/> the same way.</summary>
    internal ReceiveBuffers? OwnReceiveBuffers { get; set; }

    internal ulong UserDataOf(uint kind, uint tag = 0) => UserData.Encode(_handleBits, kind, tag);

    /// <summary>Handles one CQE of a request this owner submitted.</summary>
    internal abstract void HandleCompletion(uint kind, int result, uint flags, ulong userData);

    /// <summary>A CQE of a receive that selected buffers: <paramref name="data"/> is valid only during the call (the
    /// buffers go back to the kernel right after).</summary>
    internal virtual void HandleReceive(uint kind, ReceivedBytes data, uint flags)
        => throw new InvalidOperationException(
            $"{GetType().Name} selected a receive buffer (operation kind {kind}) but handles no received bytes.");

    /// <summary>Called when a completion handler threw; the loop keeps running.</summary>
    internal virtual void HandleException(Exception exception) => Loop.ReportUnhandled(exception);

    /// <summary>Called once the handle is freed: released, and no request in flight.</summary>
    internal virtual void OnFreed() { }

    /// <summary>Called after each request's final CQE while the owner is not released (e.g. to close its fd once the
    /// rest is done).</summary>
    internal virtual void OnRequestFinished() { }

    internal void OnSubmitted()
    {
        Debug.Assert(!_released || _inFlight > 0, "a request submitted by an owner whose handle is freed");
        _inFlight++;
    }

    internal void OnFinalCompletion()
    {
        Loop.AssertOnLoopThread();
        Debug.Assert(_inFlight > 0, "a final CQE for an owner with nothing in flight");
        if (--_inFlight == 0 && _released)
        {
            Free();
        }
        else if (!_released)
        {
            OnRequestFinished();
        }
    }

    /// <summary>No new requests after this; the handle is freed when the last in-flight request completes.</summary>
    internal void Release()
    {
        Debug.Assert(Loop.IsOnLoopThread || Loop.Stopped.IsCompleted, "an owner released off the loop thread");
        if (_released)
        {
            return;
        }
        _released = true;
        if (_inFlight == 0)
        {
            Free();
        }
    }

    private void Free()
    {
        _handle.Dispose();
        Loop.OnOwnerFreed();
        OnFreed();
    }
}
