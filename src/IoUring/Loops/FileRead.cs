using System.Buffers;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Loops;

/// <summary>
/// One <see cref="EventLoop.ReadAsync"/>: the file, the pinned buffer and the awaiter's source, reused from the loop's
/// pool once the caller has its result.
/// </summary>
/// <remarks>
/// <para>Set up on the caller's thread before it is posted, then the loop's until the result is set; the caller gets
/// it back in <see cref="GetResult"/> and returns it to the pool there, unless the token's callback ran: a cancel it
/// posted may still be on its way, so that read is left to the GC rather than reused (the version a cancel carries
/// guards the rest: a read reset since has another).</para>
/// <para>The buffer stays pinned and the file referenced (its fd number cannot be reused) until the read's final
/// completion, also when the token or the loop's stop cancelled it; a read the loop left in the kernel keeps both for
/// good (<see cref="Abandon"/>).</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class FileRead : IValueTaskSource<int>
{
    private ManualResetValueTaskSourceCore<int> _source = new() { RunContinuationsAsynchronously = true };
    private SafeFileHandle? _file;
    private MemoryHandle _pin;
    private CancellationTokenRegistration _registration;
    private bool _registered;
    // The token's callback ran, or runs now: a cancel it posted may still reach the loop and find this object, so it
    // is not reused (a reused one would take that cancel as its own).
    private bool _cancelMayArrive;
    private bool _abandoned; // the loop left it in the kernel: it keeps its pin and file for good

    public FileRead(EventLoop loop) => Loop = loop;

    public EventLoop Loop { get; }

    public short Version => _source.Version;
    public int FileDescriptor { get; private set; }
    public ReadOnlyMemory<byte> Buffer { get; private set; }
    public long Offset { get; private set; }
    public CancellationToken Token { get; private set; }

    /// <summary>The slot of the read in flight in <see cref="FileReads"/>, or -1 while it is not in the
    /// kernel.</summary>
    public int Slot { get; set; } = -1;

    /// <summary>Loop thread: the token was cancelled (a read not submitted yet is not submitted).</summary>
    public bool CancelRequested { get; set; }

    /// <summary>Caller's thread: takes the file (referenced) and the buffer (pinned) and listens to the
    /// token.</summary>
    public void Start(SafeFileHandle file, Memory<byte> buffer, long offset, CancellationToken token)
    {
        // Pinned first: a caller's MemoryManager may throw here, and then nothing is taken yet.
        MemoryHandle pin = buffer.Pin();
        bool referenced = false;
        try
        {
            file.DangerousAddRef(ref referenced); // the fd stays this file's while the kernel may read it
        }
        catch
        {
            pin.Dispose(); // a closed handle: the read never was
            throw;
        }
        _pin = pin;
        _file = file;
        FileDescriptor = (int)file.DangerousGetHandle();
        Buffer = buffer;
        Offset = offset;
        Token = token;
        CancelRequested = false;
        _registered = token.CanBeCanceled;
        if (_registered)
        {
            _registration = token.UnsafeRegister(static (s, _) =>
            {
                var read = (FileRead)s!;
                FileReads.RequestCancel(read, read.Version);
            }, this);
        }
    }

    /// <summary>The pinned buffer's address (valid until the read completes).</summary>
    public unsafe nint Address => (nint)_pin.Pointer;

    /// <summary>Loop thread (or the caller's, when the post failed): the read is over and nothing of it is in the
    /// kernel. Unpins, releases the file, completes the awaiter.</summary>
    public void Complete(int bytes, Exception? error)
    {
        // Not Dispose: that would wait here for a callback running on another thread. False: it ran or runs.
        _cancelMayArrive = _registered && !_registration.Unregister();
        _registration = default;
        _registered = false;
        _pin.Dispose();
        _pin = default;
        Buffer = default;
        _file!.DangerousRelease();
        _file = null;
        Slot = -1;
        if (error is null)
        {
            _source.SetResult(bytes);
        }
        else
        {
            _source.SetException(error);
        }
    }

    /// <summary>
    /// Loop thread, the loop leaving while the kernel still holds this read: the awaiter fails with
    /// <paramref name="error"/>, but the buffer stays pinned and the file referenced (its fd number is not reused), for
    /// good: the kernel may still write, and no completion will say when it stopped. Never reused.
    /// </summary>
    public void Abandon(Exception error)
    {
        _abandoned = true;
        _cancelMayArrive = _registered && !_registration.Unregister();
        _registration = default;
        _registered = false;
        Slot = -1;
        _source.SetException(error);
    }

    public int GetResult(short token)
    {
        // A stale token throws here, and so does a read not completed (ValueTask.Result on a pending read): before
        // anything is reset, so a read in the kernel is never handed to the next caller.
        if (_source.GetStatus(token) == ValueTaskSourceStatus.Pending)
        {
            throw new InvalidOperationException("The file read has not completed: await it before taking its result.");
        }
        try
        {
            return _source.GetResult(token);
        }
        finally
        {
            Token = default;
            if (!_cancelMayArrive && !_abandoned)
            {
                _source.Reset();
                Loop.FileReadPool.Return(this);
            }
        }
    }

    public ValueTaskSourceStatus GetStatus(short token) => _source.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _source.OnCompleted(continuation, state, token, flags);
}
