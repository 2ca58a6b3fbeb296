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
/// it back in <see cref="GetResult"/> and returns it to the pool there. A cancel posted by the token carries
/// <see cref="Version"/>: one that arrives after the read was reused finds another version and does nothing.</para>
/// <para>The buffer stays pinned and the file referenced (its fd number cannot be reused) until the read's final
/// completion, also when the token or the loop's stop cancelled it.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class FileRead : IValueTaskSource<int>
{
    private ManualResetValueTaskSourceCore<int> _source = new() { RunContinuationsAsynchronously = true };
    private SafeFileHandle? _file;
    private MemoryHandle _pin;
    private CancellationTokenRegistration _registration;

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
        bool referenced = false;
        file.DangerousAddRef(ref referenced); // the fd stays this file's while the kernel may read it
        _file = file;
        FileDescriptor = (int)file.DangerousGetHandle();
        _pin = buffer.Pin();
        Buffer = buffer;
        Offset = offset;
        Token = token;
        CancelRequested = false;
        if (token.CanBeCanceled)
        {
            _registration = token.UnsafeRegister(static (s, _) =>
            {
                var read = (FileRead)s!;
                read.Loop.RequestReadCancel(read, read.Version);
            }, this);
        }
    }

    /// <summary>The pinned buffer's address (valid until the read completes).</summary>
    public unsafe nint Address => (nint)_pin.Pointer;

    /// <summary>Loop thread (or the caller's, when the post failed): the read is over and nothing of it is in the
    /// kernel. Unpins, releases the file, completes the awaiter.</summary>
    public void Complete(int bytes, Exception? error)
    {
        _registration.Unregister(); // not Dispose: that would wait here for a callback running on another thread
        _registration = default;
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

    public int GetResult(short token)
    {
        try
        {
            return _source.GetResult(token);
        }
        finally
        {
            Token = default;
            _source.Reset();
            Loop.ReturnFileRead(this);
        }
    }

    public ValueTaskSourceStatus GetStatus(short token) => _source.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _source.OnCompleted(continuation, state, token, flags);
}
