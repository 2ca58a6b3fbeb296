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
/// The sending half of an <see cref="IoUringConnection"/>: sends what <see cref="ConnectionOutput"/> has flushed, from
/// the blocks it was written to, one SEND or SENDMSG in flight at a time; large sends go zero-copy. Loop thread only.
/// </summary>
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
        // Unix sockets have no zero-copy send; only our pool's blocks outlive Consume while pinned (null: the loop's).
        _zeroCopy = isTcp && settings.ZeroCopySendThreshold is > 0 and < long.MaxValue
            && settings.MemoryPool is null or PinnedBlockMemoryPool
            && caps.HasZeroCopySend;
        // Without REPORT_USAGE the kernel cannot say it copied: over loopback zero-copy stays on, correct but slower.
        _zeroCopyGather = caps.HasZeroCopySendMsg;
        _fixedGather = caps.HasZeroCopySendMsgFixed;
        _ignoreCopied = settings.IgnoreZeroCopyCopied;
        _zeroCopyFlags = caps.HasZeroCopyReportUsage ? IORING_SEND_ZC_REPORT_USAGE : (ushort)0;
    }

    /// <summary>Any thread: a snapshot; it only ever turns false.</summary>
    public bool MaySendZeroCopy => Volatile.Read(ref _zeroCopy);

    public bool Ended => _state == SenderState.Ended;

    public long BytesSent => Volatile.Read(ref _bytesSent) + _output.BytesSentByCallers;

    public bool AbortRequested => _connection.AbortRequested;

    /// <summary>Set by a flushing thread's failed send before it posts <see cref="OnCallerSendFailed"/>.</summary>
    public int CallerSendError { get; set; }

    /// <summary>Zero-copy sends whose notification has not arrived: they hold memory, not the fd.</summary>
    public int NotificationsPending => _notificationsPending;

    public int ZeroCopySends { get; private set; }

    public bool ZeroCopyReverted { get; private set; }

    private bool IsSending => _state is SenderState.Sending or SenderState.SendingFile;

    public void Start() => SendNext();

    public void OnOutputFlushed() => SendNext();

    /// <summary>A flushing thread's own send failed: handled as this sender's own failed send.</summary>
    public void OnCallerSendFailed()
    {
        if (_state != SenderState.Idle)
        {
            return; // closing finished the sender meanwhile
        }
        _lastSendZeroCopy = false; // the errors a zero-copy send has of its own are not this send's
        OnSendResult(-CallerSendError);
    }

    /// <summary>A borrowed write was cancelled: so is the send that may read its memory (protocol:
    /// ConnectionOutput.CancelBorrowedWriteUnsynchronized).</summary>
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
                // No SQE: again next iteration, or a send to a peer that never reads would hold the cancelled write.
                _owner.Loop.Schedule(s_cancelForBorrowedWriteAgain, this);
            }
        }
    }

    /// <summary>A sender with a send in flight ends at its completion, any other now.</summary>
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
        // After Submit: an inline continuation may close the connection, which must see this send to cancel it
        // (OutputTests.Aborting_in_the_inline_continuation_of_a_cancelled_large_write_...).
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
                // The kernel lacks a zero-copy flag or opcode: nothing was sent.
                RevertZeroCopy();
                SendNext();
                return;
            }
            if (sent is -Errno.ENOMEM or -Errno.ENOBUFS && _lastSendZeroCopy && !_connection.IsClosing)
            {
                // RLIMIT_MEMLOCK refused the pages: nothing was sent. These bytes go copied, later ones zero-copy.
                _copyNextSend = true;
                SendNext();
                return;
            }
            if (sent is -Errno.EAGAIN or -Errno.EINTR or -Errno.ENOBUFS or -Errno.ECANCELED && !_connection.IsClosing)
            {
                // Transient: nothing was sent. (After a borrowed write's cancel, Output's copies go instead.)
                SendNext();
                return;
            }
            if (sent == -Errno.ECONNRESET)
            {
                // The socket reports a reset once: the receive will see only an end of stream.
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
    /// FIN after the data, or the connection fails on <paramref name="error"/>. After a peer reset flushes see
    /// IsCompleted, not an exception (as with Kestrel's Sockets): the reset is not the application's fault.
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
        // A direct shutdown(2): SHUT_WR only queues the FIN, while IORING_OP_SHUTDOWN always goes to an io-wq worker.
        // A failure changes nothing: the connection closes either way.
        _ = Libc.shutdown(_fd, Libc.SHUT_WR);
        _state = SenderState.Ended;
        _connection.OnDirectionEnded();
    }

    // ---- File sends: a FileSender has the socket until it ends ----

    private void StartFile(FileSender file)
    {
        Debug.Assert(_state == SenderState.Idle && _fileSending is null, "a file started with a send in flight");
        _state = SenderState.SendingFile;
        _fileSending = file;
        file.Start();
    }

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

    /// <summary>Nothing of the file in flight; a <paramref name="socketErrno"/> other than 0 ends the sender.</summary>
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

    /// <summary>False when the loop had no SQE for the cancel.</summary>
    private bool CancelFileForClose() => _fileSending?.CancelForClose() ?? true;

    private void AbandonQueuedFile(Exception? error)
    {
        if (_output.QueuedFile is { } file && _output.RemoveQueuedFile(file))
        {
            file.Abandon(error);
        }
    }
}
