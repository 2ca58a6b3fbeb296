using System.Buffers;
using System.Numerics;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The sending half of an <see cref="IoUringConnection"/>: on the loop, sends what <see cref="ConnectionOutput"/> has
/// flushed, from the blocks it was written to, in one SEND (one block) or SENDMSG (gather); one send in flight at a time,
/// the next taken when its CQE comes or when a flush posts <see cref="OnOutputFlushed"/> (a flush that finds this sender
/// idle and the loop asleep may send itself first, outside the ring: <see cref="ConnectionOutput"/>; what it leaves, and
/// its errors, come here). Large sends use SEND_ZC/SENDMSG_ZC: the result CQE continues the send
/// loop at once, the memory stays pinned until the later notification CQE, and if the kernel reports it copied anyway
/// (loopback) the connection returns to plain sends.
/// </summary>
/// <remarks>
/// Loop thread only. Owns the send state: whether a send is in flight, the pins of the memory the kernel reads, the gather message (native memory, freed by
/// <see cref="FreeNativeMemory"/> once nothing is in flight) and the zero-copy pin sets and notifications.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class ConnectionSender
{
    private const int MaxIovecs = 64;
    private const int PinSets = 8; // zero-copy sends whose notification may be outstanding at once

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly ConnectionOutput _output;
    private readonly ConnectionSettings _settings;
    private bool _sending;                      // a send is in flight (its result CQE has not come)
    private bool _finished;                     // the send loop ended (Output's sender side completed)
    private MemoryHandle _singlePin;            // a plain send's one segment
    private MemoryHandle[] _pins = [];          // a plain gather's segments, made at the first: most connections never gather
    private int _pinCount;
    private bool _pinsInArray;
    private unsafe Libc.msghdr* _message;       // msghdr followed by MaxIovecs iovecs, made on first gather
    private bool _ended;
    private long _bytesSent;
    private ulong _sendInFlight;                // the user_data of the send the kernel has (0: none), to cancel it at close
    private bool _cancelledForUnborrow;         // that send's cancel for a cancelled borrowed write went (one per send)

    // Zero-copy: each SEND_ZC holds one pin set (its user_data tag) until its notification.
    private bool _zeroCopy;                     // this connection still tries SEND_ZC (off once the kernel reports it copied)
    private readonly bool _zeroCopyGather;      // SENDMSG_ZC is available (6.1+)
    private readonly bool _fixedGather;         // SENDMSG_ZC takes registered buffers (6.15+)
    private readonly bool _ignoreCopied;        // test seam: stay zero-copy even where the kernel copies (loopback)
    private readonly ushort _zeroCopyFlags;     // IORING_SEND_ZC_REPORT_USAGE where the kernel has it (6.2+)
    private bool _lastSendZeroCopy;
    private bool _copyNextSend;                 // the last zero-copy send could not pin its pages: send these bytes copied
    private MemoryHandle[][] _pinSets = [];     // per set: memory held until that send's notification
    private int[] _pinSetCounts = [];
    private int[] _pinSetSent = [];             // per set: bytes its send sent, held by Output until the notification
    private int _pinSetsBusy;                   // bit per set awaiting its notification
    private int _notificationsPending;          // zero-copy sends done with the socket, still holding memory

    public ConnectionSender(IoUringConnection connection, RingOwner owner, int fd, bool isTcp, ConnectionOutput output, ConnectionSettings settings)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _output = output;
        _settings = settings;
        // Unix domain sockets have no zero-copy send (EOPNOTSUPP).
        IoUringCapabilities caps = settings.Capabilities;
        // Only our pool's blocks outlive Output's Consume while pinned (null: the loop's own pool).
        _zeroCopy = isTcp && settings.ZeroCopySendThreshold is > 0 and < long.MaxValue
            && settings.MemoryPool is null or PinnedBlockMemoryPool
            && caps.HasZeroCopySend;
        // Without SENDMSG_ZC (6.0) only single-segment sends go zero-copy. Without REPORT_USAGE (before 6.2) the kernel
        // cannot say it copied, so a connection over loopback keeps paying for zero-copy: correct, only slower.
        _zeroCopyGather = caps.HasZeroCopySendMsg;
        _fixedGather = caps.HasZeroCopySendMsgFixed;
        _ignoreCopied = settings.IgnoreZeroCopyCopied;
        _zeroCopyFlags = caps.HasZeroCopyReportUsage ? IORING_SEND_ZC_REPORT_USAGE : (ushort)0;
    }

    /// <summary>Whether large sends may still go zero-copy (any thread: a snapshot; it only ever turns false).</summary>
    public bool MaySendZeroCopy => Volatile.Read(ref _zeroCopy);

    /// <summary>Output completed and sent (FIN queued), or the send loop ended on an error.</summary>
    public bool Ended => _ended;

    /// <summary>Bytes sent: by the ring's sends and by flushing threads themselves (<see cref="ConnectionOutput"/>).</summary>
    public long BytesSent => Volatile.Read(ref _bytesSent) + _output.BytesSentByCallers;

    /// <summary>The application aborted the connection (any thread): a flush must not send by itself any more.</summary>
    public bool AbortRequested => _connection.AbortRequested;

    /// <summary>The errno of a send a flushing thread made itself, set before it posts <see cref="OnCallerSendFailed"/>.</summary>
    public int CallerSendError { get; set; }

    /// <summary>Zero-copy sends whose notification has not arrived: they hold memory, not the fd.</summary>
    public int NotificationsPending => _notificationsPending;

    public int ZeroCopySends { get; private set; }

    public bool ZeroCopyReverted { get; private set; }

    /// <summary>Starts sending (loop thread): whatever Output has flushed, then each time a flush posts <see cref="OnOutputFlushed"/>.</summary>
    public void Start() => SendNext();

    /// <summary>Output was flushed or completed while the sender waited for it (posted to the loop by Output).</summary>
    public void OnOutputFlushed() => SendNext();

    /// <summary>
    /// A send a flushing thread made itself failed (posted to the loop by Output, which took the sender's wait for bytes
    /// as a flush's post does): handled as this sender's own send failing, so a reset, a transient error or any other
    /// ends the same way whichever thread's send met it.
    /// </summary>
    public void OnCallerSendFailed()
    {
        if (_sending || _finished)
        {
            return; // closing finished the sender meanwhile
        }
        _lastSendZeroCopy = false; // the errors a zero-copy send has of its own are not this send's
        OnSendResult(-CallerSendError);
    }

    /// <summary>
    /// A borrowed write was cancelled (posted to the loop by Output): its memory may be read only until the send in flight
    /// completes, so that send is cancelled; the next <see cref="SendNext"/> lets Output copy what is left.
    /// </summary>
    public void OnUnborrowRequested()
    {
        if (_finished || !_output.UnborrowRequested)
        {
            return; // the sender is gone, or the write completed meanwhile
        }
        if (!_sending)
        {
            SendNext();
        }
        else if (!_cancelledForUnborrow && _sendInFlight != 0)
        {
            _cancelledForUnborrow = _connection.CancelRequest(_sendInFlight);
            if (!_cancelledForUnborrow)
            {
                // No SQE (the SQ still full after an early submit): again next iteration, or a send to a peer that
                // does not read would keep the cancelled write waiting.
                _owner.Loop.Schedule(s_unborrowAgain, this);
            }
        }
    }

    private static readonly Action<object?> s_unborrowAgain = static s => ((ConnectionSender)s!).OnUnborrowRequested();

    /// <summary>Closing (loop thread): a sender waiting for Output ends now; one with a send in flight ends at its completion.</summary>
    public void OnClosing()
    {
        if (!_sending)
        {
            Finish(null, peerReset: false);
        }
    }

    /// <summary>Sends what Output has flushed, unless a send is in flight; ends when Output completed and all is sent.</summary>
    private void SendNext()
    {
        if (_sending || _finished)
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
            switch (_output.TryTake(out ConnectionOutput.Sendable bytes, out Exception? writerError, out completion))
            {
                case ConnectionOutput.OutputTake.Bytes:
                    Submit(bytes);
                    _sending = true;
                    break;
                case ConnectionOutput.OutputTake.Completed:
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
        // A cancelled borrowed write completes only now that the bytes taken are in flight (or the sender finished): its
        // continuation, inline on this thread, may close the connection, which must then see this send and cancel it.
        completion.Run();
    }

    /// <summary>A send's result (loop thread): consume what went, then send on; or end on an error.</summary>
    private void OnSendResult(int sent, bool pinnedUntilNotification = false)
    {
        _sending = false;
        _cancelledForUnborrow = false;
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
                // The kernel could not charge the pages to RLIMIT_MEMLOCK (a process without CAP_IPC_LOCK, e.g. any
                // service not run as root, or root in a container): nothing was sent. Send the same bytes the copying
                // way; later large sends try zero-copy again.
                _copyNextSend = true;
                SendNext();
                return;
            }
            if (sent is -Errno.EAGAIN or -Errno.EINTR or -Errno.ENOBUFS or -Errno.ECANCELED && !_connection.IsClosing)
            {
                // Transient: nothing was sent, send the same bytes again. Only closing and a cancelled borrowed write
                // (OnUnborrowRequested) cancel a send; the latter's bytes are Output's own copies by then.
                SendNext();
                return;
            }
            if (sent == -Errno.ECONNRESET)
            {
                // This send took the socket's one reset error (it goes to whichever request reads it first): the
                // receive will see only an end of stream, so the reset is told from here. The input fails as a reset
                // through the close below.
                _connection.NotifyPeerClosed(reset: true);
            }
            Exception? error = sent switch
            {
                -Errno.ECANCELED when _connection.IsClosing => null,
                -Errno.EPIPE or -Errno.ECONNRESET => _settings.CreateResetException("Connection reset by peer."),
                _ => new IOException($"Send failed: {IoUringException.ErrnoName(-sent)}.", SocketErrors.FromErrno(-sent)),
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
    /// fault: its writes see the output completed, FlushResult.IsCompleted, as with Kestrel's Sockets transport, instead
    /// of an exception Kestrel logs as an application error; the input still reports the reset, and the connection
    /// still closes abortively). Then FIN after the data, or the connection fails on <paramref name="error"/>.
    /// </summary>
    private void Finish(Exception? error, bool peerReset)
    {
        if (_finished)
        {
            return;
        }
        _finished = true;
        _output.CompleteSender(peerReset ? null : error);
        End(error);
    }

    /// <summary>Fills one SEND/SENDMSG (or their zero-copy forms) for <paramref name="buffer"/>; its CQE calls <see cref="OnSendResult"/>.</summary>
    private unsafe void Submit(in ConnectionOutput.Sendable buffer)
    {
        // The msghdr (~1 KiB) is made for the first gather send only: many connections (an idle keep-alive one, or a
        // response written in one piece) never need it, and it would be resident memory for each.
        if (_message == null && !buffer.IsSingleSegment)
        {
            _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxIovecs * sizeof(iovec)));
        }

        // Zero-copy pays off only for large sends, and only when the memory can be held past Consume
        // (our pool's blocks stay alive while pinned) until the kernel's notification says it is done with it.
        int pinSet = -1;
        int fixedBuffer = -1;
        int segmentLimit = MaxIovecs;
        bool copy = _copyNextSend;
        _copyNextSend = false;
        if (_zeroCopy && !copy && !buffer.Borrowed && buffer.Length >= _settings.ZeroCopySendThreshold && (_zeroCopyGather || buffer.IsSingleSegment))
        {
            pinSet = RentPinSet(buffer, out fixedBuffer, out segmentLimit);
        }
        _lastSendZeroCopy = pinSet >= 0;

        // Plain sends pin one segment in _singlePin (most sends), a gather in _pins (made at the first); zero-copy
        // sends in their pin set.
        MemoryHandle[]? pins = pinSet >= 0 ? _pinSets[pinSet]
            : buffer.IsSingleSegment ? null
            : _pins.Length == 0 ? _pins = new MemoryHandle[MaxIovecs] : _pins;
        iovec single; // a single segment goes in the SQE itself (SEND), so its iovec only lives until then
        iovec* iovecs = buffer.IsSingleSegment ? &single : (iovec*)(_message + 1);
        int count = 0;
        io_uring_sqe* sqe;
        try
        {
            foreach (ReadOnlyMemory<byte> segment in buffer)
            {
                if (segment.IsEmpty)
                {
                    continue;
                }
                MemoryHandle pin = segment.Pin(); // a lent memory's may throw
                if (pins is null)
                {
                    _singlePin = pin;
                }
                else
                {
                    pins[count] = pin;
                }
                iovecs[count] = new iovec { iov_base = (nuint)pin.Pointer, iov_len = (nuint)segment.Length };
                if (++count == segmentLimit)
                {
                    break; // the rest goes in the next send
                }
            }
            // The SQE after the pins: if either throws (a Pin, or the loop has no SQE), nothing was submitted.
            sqe = pinSet >= 0
                ? _owner.Loop.NewSqe(_owner, ConnectionRequestKind.SendZeroCopy, (uint)pinSet)
                : _owner.Loop.NewSqe(_owner, ConnectionRequestKind.Send);
        }
        catch
        {
            // Nothing will read the memory: the pins taken go now, so their blocks can go back to the pool.
            if (pinSet >= 0)
            {
                _pinSetCounts[pinSet] = count;
                ReleasePinSet((uint)pinSet);
            }
            else if (pins is not null)
            {
                ReleasePins(pins, count);
            }
            else if (count == 1)
            {
                _singlePin.Dispose();
            }
            throw;
        }

        if (pinSet >= 0)
        {
            _pinSetCounts[pinSet] = count;
            _sendInFlight = _owner.UserDataOf(ConnectionRequestKind.SendZeroCopy, (uint)pinSet);
            sqe->ioprio = _zeroCopyFlags;
            if (fixedBuffer >= 0 && (count == 1 || _fixedGather))
            {
                // Every segment lies in the one registered buffer: the kernel takes its pages from the table, unpinned per send.
                sqe->ioprio |= IORING_RECVSEND_FIXED_BUF;
                sqe->buf_index = (ushort)fixedBuffer;
            }
            else
            {
                fixedBuffer = -1;
            }
            ZeroCopySends++;
            _owner.Loop.OnZeroCopySend(fixedBuffer >= 0);
        }
        else
        {
            _pinCount = count;
            _pinsInArray = pins is not null;
            _sendInFlight = _owner.UserDataOf(ConnectionRequestKind.Send);
        }
        sqe->fd = _fd;
        sqe->msg_flags = Libc.MSG_NOSIGNAL;
        if (count == 1)
        {
            sqe->opcode = pinSet >= 0 ? IORING_OP_SEND_ZC : IORING_OP_SEND;
            sqe->addr = iovecs[0].iov_base;
            sqe->len = (uint)iovecs[0].iov_len;
        }
        else
        {
            *_message = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
            sqe->opcode = pinSet >= 0 ? IORING_OP_SENDMSG_ZC : IORING_OP_SENDMSG;
            sqe->addr = (ulong)_message;
        }
    }

    /// <summary>Closing: cancels the send the kernel has, if any (it may wait for room the peer never makes).</summary>
    /// <returns>False when the loop had no SQE for the cancel: call again.</returns>
    public bool CancelForClose() => _sendInFlight == 0 || _connection.CancelRequest(_sendInFlight);

    public void OnSendCompleted(int result)
    {
        _sendInFlight = 0;
        if (_pinsInArray)
        {
            ReleasePins(_pins, _pinCount);
        }
        else if (_pinCount == 1)
        {
            _singlePin.Dispose();
        }
        _pinCount = 0;
        Complete(result);
    }

    /// <summary>A SEND_ZC/SENDMSG_ZC CQE: its result (F_MORE: a notification follows), or its notification (F_NOTIF).</summary>
    public void OnZeroCopySendCompleted(int result, uint flags, uint pinSet)
    {
        if ((flags & IORING_CQE_F_NOTIF) != 0)
        {
            // The kernel is done with the memory.
            if ((result & unchecked((int)IORING_NOTIF_USAGE_ZC_COPIED)) != 0)
            {
                _owner.Loop.OnZeroCopySendCopied();
                if (_zeroCopy && !_ignoreCopied)
                {
                    _zeroCopy = false;
                    ZeroCopyReverted = true;
                }
            }
            _notificationsPending--;
            _owner.Loop.OnNotificationArrived();
            ReleasePinSet(pinSet);
            if (_pinSetSent[pinSet] > 0)
            {
                _output.Unpinned(_pinSetSent[pinSet]);
                _pinSetSent[pinSet] = 0;
            }
            return;
        }
        _sendInFlight = 0; // the send's result: only its notification (not cancellable) may follow
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            ReleasePinSet(pinSet); // no notification will follow (the send failed early)
        }
        else
        {
            // The request is done with the socket; only its memory waits for the notification, which may come only
            // once the peer acknowledged the data or went away. So neither closing nor the loop's stop waits for it.
            _notificationsPending++;
            _owner.Loop.OnNotificationPending();
            _pinSetSent[pinSet] = Math.Max(result, 0);
        }
        Complete(result, pinnedUntilNotification: (flags & IORING_CQE_F_MORE) != 0);
        _connection.CheckCloseProgress();
    }

    /// <summary>Nothing is in flight: the kernel no longer reads the gather message.</summary>
    public unsafe void FreeNativeMemory()
    {
        if (_message != null)
        {
            NativeMemory.Free(_message);
            _message = null;
        }
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

    private static void ReleasePins(MemoryHandle[] pins, int count)
    {
        for (int i = 0; i < count; i++)
        {
            pins[i].Dispose();
        }
    }

    private void End(Exception? error)
    {
        if (error is not null || _connection.IsClosing)
        {
            if (!_connection.IsClosing)
            {
                _connection.Fail(error); // the peer must not mistake a failed stream for a complete one
            }
            return;
        }
        // Graceful end of output: FIN after the data; the connection closes once receiving has ended too.
        // A direct shutdown(2), not IORING_OP_SHUTDOWN: the kernel always hands that opcode to an io-wq worker thread
        // (under connection churn a worker wake-up per connection, 12% of the CPU), and shutting down the sending side
        // of a socket only queues the FIN, it never blocks. A failure (the peer reset first) changes nothing here: the
        // connection closes either way.
        _ = Libc.shutdown(_fd, Libc.SHUT_WR);
        _ended = true;
        _connection.OnDirectionEnded();
    }

    /// <summary>A zero-copy send failed with EINVAL: back to plain sends for good (the caller sends the same bytes again).</summary>
    private void RevertZeroCopy()
    {
        _zeroCopy = false;
        ZeroCopyReverted = true;
    }

    /// <summary>
    /// A free pin set, if every segment to send comes from our pool (whose blocks outlive Consume while pinned); else -1.
    /// <paramref name="fixedBuffer"/>: the registered buffer the send's segments lie in, or -1. Where they span several
    /// regions but the leading ones in one registered region make at least the threshold (and gathers may be fixed),
    /// only those go (<paramref name="segmentLimit"/>): pages the kernel need not pin, the rest in the next send.
    /// </summary>
    private int RentPinSet(in ConnectionOutput.Sendable buffer, out int fixedBuffer, out int segmentLimit)
    {
        fixedBuffer = -1;
        segmentLimit = MaxIovecs;
        int segments = 0;
        int leading = 0;        // segments at the start that lie in the first segment's registered region
        long leadingBytes = 0;
        foreach (ReadOnlyMemory<byte> segment in buffer)
        {
            if (segment.IsEmpty)
            {
                continue; // as in Submit: counted alike, so segmentLimit means the same there
            }
            if (!MemoryMarshal.TryGetMemoryManager(segment, out PinnedBlockMemoryPool.Block? block))
            {
                return -1;
            }
            int index = _owner.Loop.RegisteredBufferIndex(block);
            if (segments == 0)
            {
                fixedBuffer = index;
            }
            if (leading == segments && index >= 0 && index == fixedBuffer)
            {
                leading++;
                leadingBytes += segment.Length;
            }
            if (++segments == MaxIovecs)
            {
                break; // the rest goes in the next send
            }
        }
        if (leading < segments)
        {
            // Without fixed gathers (before 6.15) one unfixed gather beats a single fixed segment per send.
            bool prefixWorthIt = _fixedGather && leading > 0 && leadingBytes >= _settings.ZeroCopySendThreshold;
            if (prefixWorthIt)
            {
                segmentLimit = leading;
            }
            else
            {
                fixedBuffer = -1;
            }
        }
        if (_pinSets.Length == 0)
        {
            _pinSets = new MemoryHandle[PinSets][];
            _pinSetCounts = new int[PinSets];
            _pinSetSent = new int[PinSets];
            for (int i = 0; i < PinSets; i++)
            {
                _pinSets[i] = new MemoryHandle[MaxIovecs];
            }
        }
        int free = ~_pinSetsBusy & ((1 << PinSets) - 1);
        if (free == 0)
        {
            segmentLimit = MaxIovecs; // a plain send instead: no reason to stop at a region's end
            fixedBuffer = -1;
            return -1;
        }
        int set = BitOperations.TrailingZeroCount(free);
        _pinSetsBusy |= 1 << set;
        return set;
    }

    private void ReleasePinSet(uint set)
    {
        ReleasePins(_pinSets[set], _pinSetCounts[set]);
        _pinSetCounts[set] = 0;
        _pinSetsBusy &= ~(1 << (int)set);
    }
}
