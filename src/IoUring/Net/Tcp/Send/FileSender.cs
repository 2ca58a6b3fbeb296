using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Net;

/// <summary>
/// One <see cref="IoUringConnection.SendFileAsync(SafeFileHandle, long, long, CancellationToken)"/>. Queued in the
/// connection's output after the bytes written before it; when the sender has sent those, it moves the file's range
/// to the socket through a pipe of its own: SPLICE file to pipe, then SPLICE pipe to socket, repeated (no user-space
/// copy). Where the kernel refuses to splice from the file (EINVAL: a file system without splice_read), or no pipe
/// could be made, it READs into a block of the connection's pool and SENDs that instead. Then the sender goes on.
/// </summary>
/// <remarks>
/// <para>Loop thread only, but for the constructor and <see cref="Discard"/> (the caller's thread, before the file is
/// queued) and the token's callback (which posts). One request in flight at a time, each the Send kind with a tag of
/// its own, so a cancel by user_data always finds the one that runs: linked SQEs would save a loop iteration per chunk,
/// but a cancel could then miss the second link before the kernel queues it, and a splice to a peer that does not read
/// waits for ever.</para>
/// <para>The pipe is this send's: made with the send (pipe2 on the caller's thread), closed when it ends. A pipe kept
/// per connection would hold two fds and a pipe's worth of the user's pipe-buffer allowance (fs.pipe-user-pages-soft:
/// past it, every new pipe of the user gets 2 pages) for every idle keep-alive connection that once sent a file; and a
/// send that ends early (end of file, cancel, error) may leave bytes in it that nothing can send any more.</para>
/// <para>The kernel runs every SPLICE on an io-wq worker thread, and a splice to a socket blocks there until the socket
/// took it all: a peer that stops reading holds one worker until it reads, or the cancel (the token, the connection's
/// close) interrupts it.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class FileSender
{
    private const int MaxPipeSize = 1024 * 1024; // fs.pipe-max-size's default: what an unprivileged process may ask for

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly ConnectionOutput _output;
    private readonly int _socket;
    private readonly SafeFileHandle _file;        // referenced (DangerousAddRef) until the send ends
    private readonly int _fileFd;
    private readonly CancellationToken _token;
    private readonly TaskCompletionSource _done = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private CancellationTokenRegistration _registration;
    private long _offset;                         // the file's next byte to take
    private long _remaining;                      // bytes of the range not taken from the file yet
    private int _pipeRead = -1, _pipeWrite = -1;  // -1: no pipe (reading instead, or ended)
    private int _pipeSize;
    private int _inPipe;                          // bytes spliced into the pipe and not out of it yet
    private uint _inFlight;                       // the tag of the request in flight, 0 for none
    private bool _started;
    private bool _ended;
    private bool _cancelRequested;                // the token was cancelled: nothing new, the one in flight cancelled
    private bool _waitForRoom;                    // the socket said EAGAIN (non-blocking): POLLOUT before splicing

    /// <summary>Caller's thread: references <paramref name="file"/>, makes the pipe (or reads instead).</summary>
    public FileSender(IoUringConnection connection, RingOwner owner, ConnectionOutput output, int socket,
        SafeFileHandle file, long offset, long count, CancellationToken token)
    {
        _connection = connection;
        _owner = owner;
        _output = output;
        _socket = socket;
        _offset = offset;
        _remaining = count;
        _token = token;
        bool referenced = false;
        file.DangerousAddRef(ref referenced); // the fd number stays the file's while a request on it may run
        _file = file;
        _fileFd = (int)file.DangerousGetHandle();
        if (count > 0)
        {
            OpenPipe(count);
        }
    }

    /// <summary>Completes when the range was sent, or fails (see the public method's documentation).</summary>
    public Task Task => _done.Task;

    /// <summary>Caller's thread, before queueing: a cancel of the token reaches the loop.</summary>
    public void RegisterCancellation()
    {
        if (_token.CanBeCanceled)
        {
            _registration = _token.UnsafeRegister(static s => ((FileSender)s!).RequestCancel(), this);
        }
    }

    /// <summary>Caller's thread: the output refused the file; nothing of it reached the loop.</summary>
    public void Discard()
    {
        _ended = true;
        _registration.Dispose(); // a callback running now only posts, and the post finds nothing queued
        ClosePipe();
        _file.DangerousRelease();
    }

    /// <summary>The sender has sent everything before the file: the file goes now.</summary>
    public void Start()
    {
        _started = true;
        Next();
    }

    private void RequestCancel()
    {
        try
        {
            _owner.Loop.Post(static s => ((FileSender)s!).OnCancelRequested(), this);
        }
        catch (ObjectDisposedException)
        {
            // The loop stopped: its connections closed, and this send with them.
        }
    }

    private void OnCancelRequested()
    {
        if (_ended)
        {
            return;
        }
        _cancelRequested = true;
        if (!_started)
        {
            // Still waiting for the bytes before it (or not queued yet: then Start sees the cancel).
            if (_output.RemoveQueuedFile(this))
            {
                End(null);
            }
            return;
        }
        SubmitCancel(); // with nothing in flight a retry is pending, and it sees the cancel
    }

    private void SubmitCancel()
    {
        if (_inFlight != 0 && !_ended && !CancelInFlight())
        {
            Retry(static f => f.SubmitCancel());
        }
    }

    /// <summary>The connection is closing: cancels the request in flight. False when the loop had no SQE.</summary>
    public bool CancelForClose() => _inFlight == 0 || CancelInFlight();

    private bool CancelInFlight()
        => _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.Send, _inFlight));

    /// <summary>The sender ended before the file's turn (closing, a send error): it fails, none of it sent.</summary>
    public void Abandon(Exception? error) => End(error ?? Closed());

    /// <summary>
    /// Ends the send, nothing of it in flight: the pipe closed, the block and the file given back, the sender told (it
    /// goes on, or ends on <paramref name="socketErrno"/>) before the task completes, so that a continuation finds the
    /// output free for its next file. A cancelled token wins over <paramref name="error"/>.
    /// </summary>
    private void End(Exception? error, int socketErrno = 0)
    {
        if (_ended)
        {
            return;
        }
        _ended = true;
        _registration.Unregister(); // not Dispose: that would wait here for a callback running on another thread
        ClosePipe();
        ReleaseBlock();
        _file.DangerousRelease();
        if (_started)
        {
            _connection.Sender.OnFileEnded(socketErrno);
        }
        if (_cancelRequested)
        {
            _done.TrySetCanceled(_token);
        }
        else if (error is not null)
        {
            _done.TrySetException(error);
        }
        else
        {
            _done.TrySetResult();
        }
    }

    /// <summary>Again in the loop's next iteration (no SQE now: the submit in between makes room), or
    /// <see cref="OnLoopGone"/>.</summary>
    private void Retry(Action<FileSender> retry)
        => _owner.Loop.RetryNextIteration(this, retry, static sender => sender.OnLoopGone());

    /// <summary>
    /// The loop is gone with a retry pending (its stop closed the connection). With nothing in flight the send ends
    /// here, the pipe and the file given back. A request the loop left in the kernel may still use them: they stay
    /// (the connection keeps its fd for the same reason), and only the task fails. Any thread, the loop gone.
    /// </summary>
    private void OnLoopGone()
    {
        if (_inFlight == 0)
        {
            End(Closed());
        }
        else
        {
            _done.TrySetException(Closed());
        }
    }

    private unsafe void OpenPipe(long count)
    {
        int* fds = stackalloc int[2];
        if (Libc.pipe2(fds, Libc.O_CLOEXEC | Libc.O_NONBLOCK) != 0)
        {
            return; // no fd left (EMFILE, ENFILE): read and send instead, which needs none
        }
        (_pipeRead, _pipeWrite) = (fds[0], fds[1]);
        _pipeSize = Libc.fcntl(_pipeWrite, Libc.F_GETPIPE_SZ, 0);
        if (count > _pipeSize)
        {
            // Fewer, larger splices for a large range; refused past the user's allowance, and the default size serves.
            int wanted = (int)Math.Min(MaxPipeSize, count);
            int size = Libc.fcntl(_pipeWrite, Libc.F_SETPIPE_SZ, wanted);
            _pipeSize = size > 0 ? size : _pipeSize;
        }
    }

    private void ClosePipe()
    {
        if (_pipeRead >= 0)
        {
            // Directly: no request on either end runs any more, and closing a pipe never blocks.
            _ = Libc.close(_pipeRead);
            _ = Libc.close(_pipeWrite);
            _pipeRead = _pipeWrite = -1;
        }
    }

    private Exception Closed() =>
        _connection.Settings.CreateAbortedException("The connection closed before the file was sent.");

    private EndOfStreamException EndOfFile() =>
        new($"The file ended at offset {_offset}, {_remaining} bytes before the end of the range to send.");

    private IOException FileError(int errno) =>
        new($"Reading the file at offset {_offset} failed: {IoUringException.ErrnoName(errno)}.");
}
