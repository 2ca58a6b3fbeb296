using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;

namespace IoUring.Loops;

/// <summary>Anything that submits requests on a loop's ring: a connection, a listener, a <see cref="RingHandler"/>.
/// Its GCHandle is freed only once it is released and its last final CQE arrived, so a handle value in the kernel
/// never names another owner.</summary>
/// <remarks>Public only as <see cref="RingHandler"/>'s base; only this library derives from it. All members but the
/// constructor run on the loop thread.</remarks>
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

    /// <summary>A UDP socket's own buffer group, used instead of the loop's.</summary>
    internal ReceiveBuffers? OwnReceiveBuffers { get; set; }

    internal ulong UserDataOf(uint kind, uint tag = 0) => UserData.Encode(_handleBits, kind, tag);

    internal abstract void HandleCompletion(uint kind, int result, uint flags, ulong userData);

    /// <summary>A receive that selected buffers; <paramref name="data"/> is valid only during the call.</summary>
    internal virtual void HandleReceive(uint kind, ReceivedBytes data, uint flags)
        => throw new InvalidOperationException(
            $"{GetType().Name} selected a receive buffer (operation kind {kind}) but handles no received bytes.");

    internal virtual void HandleException(Exception exception) => Loop.ReportUnhandled(exception);

    /// <summary>Called once the handle is freed: released, nothing in flight.</summary>
    internal virtual void OnFreed() { }

    /// <summary>After each final CQE while not released (e.g. to close the fd once the rest is done).</summary>
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
