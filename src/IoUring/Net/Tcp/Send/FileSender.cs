using System.Buffers;
using System.Diagnostics;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using Microsoft.Win32.SafeHandles;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// One <see cref="IoUringConnection.SendFileAsync(SafeFileHandle, long, long, CancellationToken)"/>, queued after the
/// bytes written before it: SPLICE file to pipe, then pipe to socket; where the file cannot be spliced (EINVAL) or no
/// pipe could be made, READ into a pool block and SEND that.
/// </summary>
/// <remarks>
/// Loop thread only, but for the constructor, <see cref="Discard"/> and the token's callback. One request in flight,
/// never linked SQEs: a cancel by user_data could miss the second of them. The pipe is this send's alone: one per
/// connection would hold two fds per idle connection (docs/design-notes.md, "Send"). A SPLICE to a socket blocks an
/// io-wq worker until the socket took it all, or the cancel.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class FileSender
{
    private const int MaxPipeSize = 1024 * 1024; // fs.pipe-max-size's default: what an unprivileged process may ask for
    // user_data tags of the Send kind (tag 0 is the connection's own SEND)
    private const uint SpliceInTag = 1;   // SPLICE file -> pipe
    private const uint SpliceOutTag = 2;  // SPLICE pipe -> socket
    private const uint PollTag = 3;       // POLL_ADD for POLLOUT on a non-blocking socket that said EAGAIN
    private const uint ReadTag = 4;       // READ file -> block (no splice)
    private const uint SendTag = 5;       // SEND block -> socket
    private const uint PollOut = 0x4;

    private static readonly int s_pageSize = Environment.SystemPageSize;

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
    private IMemoryOwner<byte>? _block;           // the read-and-send way's block, from the connection's pool
    private MemoryHandle _blockPin;
    private int _blockStart, _blockEnd;           // its bytes read and not sent yet

    /// <summary>Caller's thread: references <paramref name="file"/> and makes the pipe.</summary>
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

    public Task Task => _done.Task;

    /// <summary>Caller's thread, before queueing.</summary>
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

    public void Start()
    {
        Debug.Assert(!_started && _inFlight == 0, "a file send started twice");
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
            // Not started (or not queued yet: then Start sees the cancel).
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

    /// <summary>False when the loop had no SQE for the cancel.</summary>
    public bool CancelForClose() => _inFlight == 0 || CancelInFlight();

    private bool CancelInFlight()
        => _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.Send, _inFlight));

    /// <summary>The sender ended before the file's turn: it fails, none of it sent.</summary>
    public void Abandon(Exception? error) => End(error ?? Closed());

    /// <summary>The sender is told before the task completes, so a continuation finds the output free for its next
    /// file. A cancelled token wins over <paramref name="error"/>.</summary>
    private void End(Exception? error, int socketErrno = 0)
    {
        if (_ended)
        {
            return;
        }
        Debug.Assert(_inFlight == 0, "a file send ended under a request that may use its pipe or block");
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

    private void Retry(Action<FileSender> retry)
        => _owner.Loop.RetryNextIteration(this, retry, static sender => sender.OnLoopGone());

    /// <summary>Any thread. A request left in the kernel may still use the pipe and the file: then they stay, and only
    /// the task fails.</summary>
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
            // Fewer, larger splices; refused past the user's allowance, the default size serves.
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

    // ---- The requests, one at a time ----

    private void Next()
    {
        Debug.Assert(_inFlight == 0, "a next request while one is in flight");
        if (_connection.IsClosing)
        {
            End(Closed());
        }
        else if (_cancelRequested)
        {
            End(null);
        }
        else if (_pipeRead >= 0)
        {
            Submit(_waitForRoom ? PollTag : _inPipe > 0 ? SpliceOutTag : _remaining > 0 ? SpliceInTag : 0);
        }
        else
        {
            if (_block is null && _remaining > 0)
            {
                RentBlock(); // the first read: no pipe could be made, or the kernel refused to splice from the file
            }
            Submit(_blockEnd > _blockStart ? SendTag : _remaining > 0 ? ReadTag : 0);
        }
    }

    private unsafe void Submit(uint tag)
    {
        if (tag == 0)
        {
            End(null); // the whole range went
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Send, tag);
        if (sqe == null)
        {
            Retry(static f => f.Next());
            return;
        }
        Debug.Assert(_inFlight == 0 && !_ended, "one request in flight at a time");
        _inFlight = tag;
        switch (tag)
        {
            case SpliceInTag:
                // At most what the empty pipe holds: a slot takes one page at most (the first only to its page's end).
                sqe->opcode = IORING_OP_SPLICE;
                // SAFETY: the file stays referenced (DangerousAddRef) and the pipe open until End, after this CQE.
                sqe->splice_fd_in = _fileFd;
                sqe->splice_off_in = (ulong)_offset;
                sqe->fd = _pipeWrite;
                sqe->off = ulong.MaxValue; // -1: a pipe has no offset
                sqe->len = (uint)Math.Min(_remaining, _pipeSize - (int)(_offset % s_pageSize));
                break;
            case SpliceOutTag:
                sqe->opcode = IORING_OP_SPLICE;
                // SAFETY: the pipe closes only in End, after this CQE; the socket once no request of ours runs.
                sqe->splice_fd_in = _pipeRead;
                sqe->splice_off_in = ulong.MaxValue;
                sqe->fd = _socket;
                sqe->off = ulong.MaxValue;
                sqe->len = (uint)_inPipe;
                break;
            case PollTag:
                sqe->opcode = IORING_OP_POLL_ADD;
                sqe->fd = _socket;
                sqe->poll32_events = PollOut;
                break;
            case ReadTag:
                sqe->opcode = IORING_OP_READ;
                sqe->fd = _fileFd;
                sqe->off = (ulong)_offset;
                // SAFETY: the block stays pinned until ReleaseBlock in End, which runs with nothing in flight.
                sqe->addr = (ulong)_blockPin.Pointer;
                sqe->len = (uint)Math.Min(_remaining, _block!.Memory.Length);
                break;
            default:
                sqe->opcode = IORING_OP_SEND;
                sqe->fd = _socket;
                // SAFETY: as the READ's: the block stays pinned until End, after this CQE.
                sqe->addr = (ulong)((byte*)_blockPin.Pointer + _blockStart);
                sqe->len = (uint)(_blockEnd - _blockStart);
                sqe->msg_flags = Libc.MSG_NOSIGNAL;
                break;
        }
    }

    public void OnCompletion(uint tag, int result)
    {
        Debug.Assert(tag == _inFlight, "a CQE for a request not in flight");
        _inFlight = 0;
        if (_ended)
        {
            return;
        }
        // EINTR: a cancel interrupted it in its worker; ECANCELED: it never ran. Either way Next sees why, or retries.
        if (result is -Errno.EINTR or -Errno.ECANCELED)
        {
            Next();
            return;
        }
        switch (tag)
        {
            case SpliceInTag when result == -Errno.EINVAL:
                // No splice_read on this file system: read and send instead (the pipe is empty here).
                ClosePipe();
                break;
            case SpliceInTag or ReadTag when result > 0:
                _offset += result;
                _remaining -= result;
                if (tag == SpliceInTag)
                {
                    _inPipe += result;
                }
                else
                {
                    (_blockStart, _blockEnd) = (0, result);
                }
                break;
            case SpliceInTag or ReadTag:
                End(result == 0 ? EndOfFile() : FileError(-result)); // 0: the file shrank since the call
                return;
            case SpliceOutTag or SendTag when result > 0:
                if (tag == SpliceOutTag)
                {
                    _inPipe -= result;
                }
                else
                {
                    _blockStart += result;
                }
                _connection.Sender.OnFileBytesSent(result);
                break;
            case SpliceOutTag when result == -Errno.EAGAIN:
                _waitForRoom = true; // a non-blocking socket (O_NONBLOCK set through its Socket): wait for room
                break;
            case SendTag when result is -Errno.EAGAIN or -Errno.ENOBUFS:
                break; // transient: nothing was sent, send the same bytes again
            case SpliceOutTag or SendTag:
                // A socket error (0: nothing can move, so fail rather than spin).
                int errno = result == 0 ? Errno.EPIPE : -result;
                End(_connection.Settings.CreateSendException(errno), errno); // as the connection's own sends report it
                return;
            default: // PollTag: the socket has room, or an error the next splice reports
                _waitForRoom = false;
                break;
        }
        Next();
    }

    private void RentBlock()
    {
        _block = _connection.MemoryPool.Rent();
        _blockPin = _block.Memory.Pin();
    }

    private void ReleaseBlock()
    {
        Debug.Assert(_inFlight == 0, "the block released under a READ or SEND");
        if (_block is not null)
        {
            _blockPin.Dispose();
            _block.Dispose();
            _block = null;
        }
    }
}
