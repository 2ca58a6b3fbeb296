using System.Buffers;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Loops;

/// <summary>One <see cref="EventLoop.ReadAsync"/>: the file, the pinned buffer and the awaiter's source, reused once
/// the caller has its result.</summary>
/// <remarks>The buffer stays pinned and the file referenced (its fd number is not reused) until the read's final
/// completion.</remarks>
[SupportedOSPlatform("linux")]
internal sealed class FileRead : IValueTaskSource<int>
{
    private ManualResetValueTaskSourceCore<int> _source = new() { RunContinuationsAsynchronously = true };
    private SafeFileHandle? _file;
    private MemoryHandle _pin;
    private CancellationTokenRegistration _registration;
    private bool _registered;
    // The token's callback ran or runs: its posted cancel may still arrive, so this object is left to the GC (a reused
    // one would take that cancel as its own).
    private bool _cancelMayArrive;
    private bool _abandoned; // the loop left it in the kernel: it keeps its pin and file for good

    public FileRead(EventLoop loop) => Loop = loop;

    public EventLoop Loop { get; }

    public short Version => _source.Version;
    public int FileDescriptor { get; private set; }
    public ReadOnlyMemory<byte> Buffer { get; private set; }
    public long Offset { get; private set; }
    public CancellationToken Token { get; private set; }

    /// <summary>Its slot in <see cref="FileReads"/>, or -1 while not in the kernel.</summary>
    public int Slot { get; set; } = -1;

    public bool CancelRequested { get; set; }

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

    // Valid until Complete.
    public unsafe nint Address => (nint)_pin.Pointer;

    /// <summary>Ends a read with nothing of it in the kernel. Loop thread, or the caller's when the post
    /// failed.</summary>
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

    /// <summary>The loop leaves with this read in the kernel: the awaiter fails, but the buffer stays pinned and the
    /// file referenced for good, as the kernel may still write. Never reused.</summary>
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
        // A stale token or a pending read throws here, before anything is reset: a read in the kernel is never handed
        // to the next caller.
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
