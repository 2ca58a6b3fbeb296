using System.Buffers;
using System.Diagnostics;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The sending half of an <see cref="IoUringConnection"/>: on the loop, sends what <see cref="ConnectionOutput"/> has
/// flushed, from the blocks it was written to, one SEND or SENDMSG in flight at a time, the next taken at its CQE or
/// when a flush posts <see cref="OnOutputFlushed"/>. Large sends go zero-copy (ConnectionSender.ZeroCopy.cs).
/// </summary>
/// <remarks>
/// Loop thread only (docs/architecture.md, "Threads and locks"). Owns the send state (<see cref="SenderState"/>), the
/// pins of the memory the kernel reads, the gather message (native memory, freed by <see cref="FreeNativeMemory"/> once
/// nothing is in flight) and the zero-copy pin sets and notifications.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionSender
{
    private const int MaxIovecs = 64;
    private const int PinSets = 8; // zero-copy sends whose notification may be outstanding at once

    private static readonly Action<object?> s_cancelForBorrowedWriteAgain =
        static s => ((ConnectionSender)s!).OnBorrowedWriteCancelled();

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly ConnectionOutput _output;
    private readonly ConnectionSettings _settings;
    private SenderState _state;
    private MemoryHandle _singlePin;            // a plain send's one segment
    private MemoryHandle[] _pins = [];          // a plain gather's segments, made at the first: most never gather
    private int _pinCount;
    private bool _pinsInArray;
    private unsafe Libc.msghdr* _message;       // msghdr followed by MaxIovecs iovecs, made on first gather
    private long _bytesSent;
    private ulong _sendInFlight;                // the user_data of the send the kernel has (0: none), to cancel it
    private bool _cancelledForBorrowedWrite;    // that send's cancel for a cancelled borrowed write went (one per send)
    private FileSender? _fileSending;           // the file being sent (SendingFile)

    // Zero-copy: each SEND_ZC holds one pin set (its user_data tag) until its notification.
    private bool _zeroCopy;                     // still tries SEND_ZC (off once the kernel reports it copied)
    private readonly bool _zeroCopyGather;      // SENDMSG_ZC is available
    private readonly bool _fixedGather;         // SENDMSG_ZC takes registered buffers
    private readonly bool _ignoreCopied;        // test seam: stay zero-copy even where the kernel copies (loopback)
    private readonly ushort _zeroCopyFlags;     // IORING_SEND_ZC_REPORT_USAGE where the kernel has it
    private bool _lastSendZeroCopy;
    private bool _copyNextSend;                 // the last zero-copy send could not pin its pages: send copied
    private MemoryHandle[][] _pinSets = [];     // per set: memory held until that send's notification
    private int[] _pinSetCounts = [];
    private int[] _pinSetSent = [];             // per set: bytes its send sent, held by Output until the notification
    private int _pinSetsBusy;                   // bit per set awaiting its notification
    private int _notificationsPending;          // zero-copy sends done with the socket, still holding memory

    public ConnectionSender(IoUringConnection connection, RingOwner owner, int fd, bool isTcp, ConnectionOutput output,
        ConnectionSettings settings)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _output = output;
        _settings = settings;
        IoUringCapabilities caps = settings.Capabilities;
        // Unix domain sockets have no zero-copy send (EOPNOTSUPP); only our pool's blocks outlive Output's Consume
        // while pinned (null: the loop's own pool).
        _zeroCopy = isTcp && settings.ZeroCopySendThreshold is > 0 and < long.MaxValue
            && settings.MemoryPool is null or PinnedBlockMemoryPool
            && caps.HasZeroCopySend;
        // Without SENDMSG_ZC only single-segment sends go zero-copy. Without REPORT_USAGE the kernel cannot say it
        // copied, so a connection over loopback keeps paying for zero-copy: correct, only slower.
        _zeroCopyGather = caps.HasZeroCopySendMsg;
        _fixedGather = caps.HasZeroCopySendMsgFixed;
        _ignoreCopied = settings.IgnoreZeroCopyCopied;
        _zeroCopyFlags = caps.HasZeroCopyReportUsage ? IORING_SEND_ZC_REPORT_USAGE : (ushort)0;
    }

    /// <summary>Any thread: a snapshot; it only ever turns false.</summary>
    public bool MaySendZeroCopy => Volatile.Read(ref _zeroCopy);

    /// <summary>Output completed and all of it sent: FIN queued.</summary>
    public bool Ended => _state == SenderState.Ended;

    /// <summary>Bytes sent: by the ring's sends and by flushing threads themselves.</summary>
    public long BytesSent => Volatile.Read(ref _bytesSent) + _output.BytesSentByCallers;

    public bool AbortRequested => _connection.AbortRequested;

    /// <summary>The errno of a send a flushing thread made itself, set before it posts
    /// <see cref="OnCallerSendFailed"/>.</summary>
    public int CallerSendError { get; set; }

    /// <summary>Zero-copy sends whose notification has not arrived: they hold memory, not the fd.</summary>
    public int NotificationsPending => _notificationsPending;

    public int ZeroCopySends { get; private set; }

    public bool ZeroCopyReverted { get; private set; }

    private bool IsSending => _state is SenderState.Sending or SenderState.SendingFile;

    public void Start() => SendNext();

    public void OnOutputFlushed() => SendNext();

    /// <summary>
    /// A send a flushing thread made itself failed (posted by Output, which took the sender's wait as a flush's post
    /// does): handled as this sender's own send failing, so an error ends the same way whichever thread met it.
    /// </summary>
    public void OnCallerSendFailed()
    {
        if (_state != SenderState.Idle)
        {
            return; // closing finished the sender meanwhile
        }
        _lastSendZeroCopy = false; // the errors a zero-copy send has of its own are not this send's
        OnSendResult(-CallerSendError);
    }

    /// <summary>
    /// A borrowed write was cancelled (posted by Output): its memory may be read only until the send in flight
    /// completes, so that send is cancelled; the next <see cref="SendNext"/> lets Output copy what is left.
    /// </summary>
    public void OnBorrowedWriteCancelled()
    {
        if (_state >= SenderState.Finished || !_output.BorrowedWriteCancelled)
        {
            return; // the sender is gone, or the write completed meanwhile
        }
        if (_state == SenderState.Idle)
        {
            SendNext();
        }
        else if (!_cancelledForBorrowedWrite && _sendInFlight != 0)
        {
            _cancelledForBorrowedWrite = _connection.CancelRequest(_sendInFlight);
            if (!_cancelledForBorrowedWrite)
            {
                // No SQE (the SQ still full after an early submit): again next iteration, or a send to a peer that
                // does not read would keep the cancelled write waiting.
                _owner.Loop.Schedule(s_cancelForBorrowedWriteAgain, this);
            }
        }
    }

    /// <summary>Closing (loop thread): a sender waiting for Output ends now; one with a send in flight ends at its
    /// completion.</summary>
    public void OnClosing()
    {
        if (!IsSending)
        {
            Finish(null, peerReset: false);
        }
    }

    private void SendNext()
    {
        if (_state != SenderState.Idle)
        {
            return;
        }
        if (_connection.IsClosing)
        {
            Finish(null, peerReset: false);
            return;
        }
        AwaiterCompletion completion = default;
        try
        {
            switch (_output.TakeWork(out UnsentBytes bytes, out Exception? writerError, out completion))
            {
                case SendWork.Bytes:
                    Submit(bytes);
                    _state = SenderState.Sending;
                    break;
                case SendWork.File:
                    StartFile(_output.QueuedFile!);
                    break;
                case SendWork.Completed:
                    Finish(writerError, peerReset: false);
                    break;
                default:
                    break; // the next flush posts OnOutputFlushed
            }
        }
        catch (Exception ex)
        {
            Finish(ex, peerReset: false); // no SQE (the loop could not submit to make room): the connection fails
        }
        // A cancelled borrowed write completes only now that the bytes taken are in flight: its continuation, inline
        // on this thread, may close the connection, which must then see this send and cancel it.
        completion.Run();
    }

    private void OnSendResult(int sent, bool pinnedUntilNotification = false)
    {
        Debug.Assert(_state is SenderState.Idle or SenderState.Sending, "a send result with no send in flight");
        if (_state == SenderState.Sending)
        {
            _state = SenderState.Idle;
        }
        _cancelledForBorrowedWrite = false;
        if (sent < 0)
        {
            if (sent == -Errno.EINVAL && _lastSendZeroCopy && !_connection.IsClosing)
            {
                // The kernel refused the zero-copy send itself (a flag or opcode it lacks): nothing was sent.
                RevertZeroCopy();
                SendNext();
                return;
            }
            if (sent is -Errno.ENOMEM or -Errno.ENOBUFS && _lastSendZeroCopy && !_connection.IsClosing)
            {
                // The pages could not be charged to RLIMIT_MEMLOCK (no CAP_IPC_LOCK): nothing was sent. Send the same
                // bytes copied; later large sends try zero-copy again.
                _copyNextSend = true;
                SendNext();
                return;
            }
            if (sent is -Errno.EAGAIN or -Errno.EINTR or -Errno.ENOBUFS or -Errno.ECANCELED && !_connection.IsClosing)
            {
                // Transient: nothing was sent, send the same bytes again. Only closing and a cancelled borrowed write
                // cancel a send; the latter's bytes are Output's own copies by then.
                SendNext();
                return;
            }
            if (sent == -Errno.ECONNRESET)
            {
                // This send took the socket's one reset error: the receive will see only an end of stream, so the
                // reset is told from here.
                _connection.NotifyPeerClosed(reset: true);
            }
            Exception? error = sent switch
            {
                -Errno.ECANCELED when _connection.IsClosing => null,
                _ => _settings.CreateSendException(-sent),
            };
            Finish(error, peerReset: sent is -Errno.EPIPE or -Errno.ECONNRESET);
            return;
        }
        // After the completion, never before: the kernel read these bytes until now.
        _output.Consume(sent, pinnedUntilNotification);
        SendNext(); // the rest of a partial send, what was flushed meanwhile, or the end
    }

    /// <summary>
    /// The send loop ends: Output's flushes see it (a peer that reset or stopped reading is not the application's
    /// fault: its writes see FlushResult.IsCompleted, as with Kestrel's Sockets transport, instead of an exception).
    /// Then FIN after the data, or the connection fails on <paramref name="error"/>.
    /// </summary>
    private void Finish(Exception? error, bool peerReset)
    {
        if (_state >= SenderState.Finished)
        {
            return;
        }
        _state = SenderState.Finished;
        _output.CompleteSender(peerReset ? null : error);
        AbandonQueuedFile(error);
        End(error);
    }

    private void Complete(int result, bool pinnedUntilNotification = false)
    {
        if (result > 0)
        {
            _bytesSent += result;
            _owner.Loop.OnBytesSent(result);
        }
        OnSendResult(result, pinnedUntilNotification); // may submit the next send
    }

    private void End(Exception? error)
    {
        Debug.Assert(_state == SenderState.Finished, "the send loop ends once");
        if (error is not null || _connection.IsClosing)
        {
            if (!_connection.IsClosing)
            {
                _connection.Fail(error); // the peer must not mistake a failed stream for a complete one
            }
            return;
        }
        // Graceful end: FIN after the data. A direct shutdown(2), not IORING_OP_SHUTDOWN, which the kernel always hands
        // to an io-wq worker; shutting down the sending side only queues the FIN, it never blocks. A failure (the peer
        // reset first) changes nothing: the connection closes either way.
        _ = Libc.shutdown(_fd, Libc.SHUT_WR);
        _state = SenderState.Ended;
        _connection.OnDirectionEnded();
    }

    // ---- File sends: once the bytes flushed before a file are sent, its FileSender has the socket until it ends ----

    private void StartFile(FileSender file)
    {
        Debug.Assert(_state == SenderState.Idle && _fileSending is null, "a file started with a send in flight");
        _state = SenderState.SendingFile;
        _fileSending = file;
        file.Start();
    }

    /// <summary>A CQE of the running file send's request (the Send kind with its tag).</summary>
    public void OnFileCompletion(uint tag, int result)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        Debug.Assert(_fileSending is not null, "a file send's CQE with no file sending");
        _fileSending.OnCompletion(tag, result);
    }

    public void OnFileBytesSent(int count)
    {
        _bytesSent += count;
        _owner.Loop.OnBytesSent(count);
    }

    /// <summary>
    /// The running file send ended, nothing of it in flight: the output goes on after it; a socket error
    /// (<paramref name="socketErrno"/>, not 0) ends the sender as its own send's would.
    /// </summary>
    public void OnFileEnded(int socketErrno)
    {
        Debug.Assert(_state == SenderState.SendingFile, "a file ended that was not sending");
        _fileSending = null;
        _output.EndFile();
        _state = SenderState.Idle;
        if (socketErrno != 0)
        {
            _lastSendZeroCopy = false;
            OnSendResult(-socketErrno);
        }
        else
        {
            SendNext();
        }
    }

    /// <summary>Closing: cancels the file send's request in flight, if any. False when the loop had no SQE.</summary>
    private bool CancelFileForClose() => _fileSending?.CancelForClose() ?? true;

    /// <summary>The sender ended with a file still queued: it fails, none of it sent.</summary>
    private void AbandonQueuedFile(Exception? error)
    {
        if (_output.QueuedFile is { } file && _output.RemoveQueuedFile(file))
        {
            file.Abandon(error);
        }
    }
}
