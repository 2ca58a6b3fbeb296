using System.Buffers;
using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// The requests of a file send, one at a time on the loop thread: which comes next, its SQE, and its result.
internal sealed partial class FileSender
{
    // user_data tags of the Send kind (tag 0 is the connection's own SEND).
    private const uint SpliceInTag = 1;   // SPLICE file -> pipe
    private const uint SpliceOutTag = 2;  // SPLICE pipe -> socket
    private const uint PollTag = 3;       // POLL_ADD for POLLOUT on a non-blocking socket that said EAGAIN
    private const uint ReadTag = 4;       // READ file -> block (no splice)
    private const uint SendTag = 5;       // SEND block -> socket
    private const uint PollOut = 0x4;

    private static readonly int s_pageSize = Environment.SystemPageSize;

    private IMemoryOwner<byte>? _block;   // the read-and-send way's block, from the connection's pool
    private MemoryHandle _blockPin;
    private int _blockStart, _blockEnd;   // its bytes read and not sent yet

    /// <summary>Submits the next request, or ends the send: all of it went, the token was cancelled, or the connection
    /// closes.</summary>
    private void Next()
    {
        Debug.Assert(_inFlight == 0);
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
        _inFlight = tag;
        switch (tag)
        {
            case SpliceInTag:
                // No more than the empty pipe holds: each of its slots takes one page of the file at most (the first
                // up to the page's end), and a splice into a full pipe would fail the rest (O_NONBLOCK) or wait.
                sqe->opcode = IORING_OP_SPLICE;
                sqe->splice_fd_in = _fileFd;
                sqe->splice_off_in = (ulong)_offset;
                sqe->fd = _pipeWrite;
                sqe->off = ulong.MaxValue; // -1: a pipe has no offset
                sqe->len = (uint)Math.Min(_remaining, _pipeSize - (int)(_offset % s_pageSize));
                break;
            case SpliceOutTag:
                sqe->opcode = IORING_OP_SPLICE;
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
                // SAFETY: ReleaseBlock unpins only when no READ or SEND of this file send is in flight.
                sqe->addr = (ulong)_blockPin.Pointer;
                sqe->len = (uint)Math.Min(_remaining, _block!.Memory.Length);
                break;
            default:
                sqe->opcode = IORING_OP_SEND;
                sqe->fd = _socket;
                sqe->addr = (ulong)((byte*)_blockPin.Pointer + _blockStart);
                sqe->len = (uint)(_blockEnd - _blockStart);
                sqe->msg_flags = Libc.MSG_NOSIGNAL;
                break;
        }
    }

    /// <summary>The CQE of the request in flight: its result taken, then the next one (or the end).</summary>
    public void OnCompletion(uint tag, int result)
    {
        Debug.Assert(tag == _inFlight);
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
                // The kernel cannot splice from this file (a file system without splice_read): read and send instead,
                // from where the file was (the pipe is empty: nothing is spliced in while it holds bytes).
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
                // A socket error (0 would mean nothing can move: fail rather than spin). The connection's sender ends
                // on it as on its own send's.
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
        if (_block is not null)
        {
            _blockPin.Dispose();
            _block.Dispose();
            _block = null;
        }
    }
}
