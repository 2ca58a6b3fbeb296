using System.Buffers;
using System.IO.Pipelines;
using System.Numerics;
using System.Runtime.InteropServices;
using System.Threading.Tasks.Sources;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The sending half of an <see cref="IoUringConnection"/>: reads Output on the loop and sends every readable segment in
/// one SEND (one segment) or SENDMSG (gather). Large sends use SEND_ZC/SENDMSG_ZC: the result CQE continues the send
/// loop at once, the memory stays pinned until the later notification CQE, and if the kernel reports it copied anyway
/// (loopback) the connection returns to plain sends.
/// </summary>
/// <remarks>
/// Loop thread only. Owns the send state: the pending send (this is its <see cref="IValueTaskSource{T}"/>, completed
/// inline from the CQE), the pins of the memory the kernel reads, the gather message (native memory, freed by
/// <see cref="FreeNativeMemory"/> once nothing is in flight) and the zero-copy pin sets and notifications.
/// </remarks>
internal sealed class ConnectionSender : PipeScheduler, IValueTaskSource<int>
{
    private const int MaxIovecs = 64;
    private const int PinSets = 8; // zero-copy sends whose notification may be outstanding at once

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private PipeReader _output = null!;         // set once by Attach (the pipe is made with this as its reader's scheduler)
    private readonly ConnectionSettings _settings;
    private readonly bool _directSends;
    private int _offLoop;                       // 1 while RunAsync runs on an application thread: it may use the fd
    private int _closing;                       // 1 once the connection began closing: no direct send starts
    private ManualResetValueTaskSourceCore<int> _source; // mutable struct: never readonly
    private MemoryHandle[] _pins = [];          // grown on first use: most connections only ever send one segment
    private int _pinCount;
    private unsafe Libc.msghdr* _message;       // msghdr followed by MaxIovecs iovecs, made on first gather
    private bool _ended;
    private long _bytesSent;

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
    private int _pinSetsBusy;                   // bit per set awaiting its notification
    private int _notificationsPending;          // zero-copy sends done with the socket, still holding memory

    public ConnectionSender(IoUringConnection connection, RingOwner owner, int fd, bool isTcp, ConnectionSettings settings)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _settings = settings;
        _directSends = settings.DirectSends;
        // Unix domain sockets have no zero-copy send (EOPNOTSUPP).
        IoUringCapabilities caps = settings.Capabilities;
        // Only our pool's blocks outlive the pipe's AdvanceTo while pinned (null: the loop's own pool).
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

    /// <summary>Gives the sender Output's reader, once, before <see cref="RunAsync"/>.</summary>
    public void Attach(PipeReader output) => _output = output;

    /// <summary>Output completed and sent (FIN queued), or the send loop ended on an error.</summary>
    public bool Ended => _ended;

    public long BytesSent => Volatile.Read(ref _bytesSent);

    /// <summary>Zero-copy sends whose notification has not arrived: they hold memory, not the fd.</summary>
    public int NotificationsPending => _notificationsPending;

    public int ZeroCopySends { get; private set; }

    public bool ZeroCopyReverted { get; private set; }

    public async Task RunAsync()
    {
        // Runs on the loop: Output's reader scheduler is the loop, and sends complete inline from their CQE.
        PipeReader reader = _output;
        Exception? error = null;
        bool peerReset = false;
        try
        {
            while (true)
            {
                ReadResult result = await reader.ReadAsync().ConfigureAwait(false);
                if (!_owner.Loop.IsOnLoopThread && !CanSendDirectly(result))
                {
                    await new LoopHop(_owner.Loop); // an end, a cancel or a zero-copy send: those are the loop's
                }
                if (result.IsCanceled)
                {
                    break; // closing
                }
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (!buffer.IsEmpty)
                {
                    int sent = await SendAsync(buffer).ConfigureAwait(false);
                    if (sent < buffer.Length && !_owner.Loop.IsOnLoopThread)
                    {
                        await new LoopHop(_owner.Loop); // a direct send that did not take it all: the ring waits for room, errors are the loop's
                    }
                    if (sent < 0)
                    {
                        if (sent == -Errno.EINVAL && _lastSendZeroCopy && !_connection.IsClosing)
                        {
                            // The kernel refused the zero-copy send itself (a flag or opcode it lacks): nothing was sent.
                            RevertZeroCopy();
                            reader.AdvanceTo(buffer.Start);
                            continue;
                        }
                        if (sent is -Errno.ENOMEM or -Errno.ENOBUFS && _lastSendZeroCopy && !_connection.IsClosing)
                        {
                            // The kernel could not charge the pages to RLIMIT_MEMLOCK (a process without
                            // CAP_IPC_LOCK, e.g. any service not run as root, or root in a container): nothing was
                            // sent. Send the same bytes the copying way; later large sends try zero-copy again.
                            _copyNextSend = true;
                            reader.AdvanceTo(buffer.Start);
                            continue;
                        }
                        if (sent is -Errno.EAGAIN or -Errno.EINTR or -Errno.ENOBUFS && !_connection.IsClosing)
                        {
                            reader.AdvanceTo(buffer.Start); // transient: nothing was sent, send the same bytes again
                            continue;
                        }
                        reader.AdvanceTo(buffer.End);
                        peerReset = sent is -Errno.EPIPE or -Errno.ECONNRESET;
                        if (sent == -Errno.ECONNRESET)
                        {
                            // This send took the socket's one reset error (it goes to whichever request reads it first):
                            // the receive will see only an end of stream, so the reset is told from here. The input
                            // fails as a reset through End below.
                            _connection.NotifyPeerClosed(reset: true);
                        }
                        error = sent switch
                        {
                            -Errno.ECANCELED when _connection.IsClosing => null,
                            -Errno.EPIPE or -Errno.ECONNRESET => _settings.CreateResetException("Connection reset by peer."),
                            _ => new IOException($"Send failed: {IoUringException.ErrnoName(-sent)}.", SocketErrors.FromErrno(-sent)),
                        };
                        break;
                    }
                    // After the completion, never before: the kernel read these bytes until now.
                    reader.AdvanceTo(buffer.GetPosition(sent));
                    if (sent < buffer.Length)
                    {
                        continue; // partial send: the rest is readable at once
                    }
                }
                else
                {
                    reader.AdvanceTo(buffer.End);
                }
                if (result.IsCompleted)
                {
                    break;
                }
            }
        }
        catch (Exception ex)
        {
            error = ex;
        }
        // A peer that reset or stopped reading is not the application's fault: its writes see the output completed
        // (FlushResult.IsCompleted), as with Kestrel's Sockets transport, instead of an exception Kestrel logs as an
        // application error. The input still reports the reset, and the connection still closes abortively.
        reader.Complete(peerReset ? null : error);
        End(error);
    }

    private unsafe ValueTask<int> SendAsync(in ReadOnlySequence<byte> buffer)
    {
        if (!_owner.Loop.IsOnLoopThread)
        {
            return new ValueTask<int>(SendDirectly(buffer));
        }
        if (_connection.IsClosing)
        {
            return new ValueTask<int>(-Errno.ECANCELED);
        }
        _source.Reset();
        // The msghdr (~1 KiB) is made for the first gather send only: many connections (an idle keep-alive one, or a
        // response written in one piece) never need it, and it would be resident memory for each.
        if (_message == null && !buffer.IsSingleSegment)
        {
            _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxIovecs * sizeof(iovec)));
        }

        // Zero-copy pays off only for large sends, and only when the memory can be held past AdvanceTo
        // (our pool's blocks stay alive while pinned) until the kernel's notification says it is done with it.
        int pinSet = -1;
        int fixedBuffer = -1;
        int segmentLimit = MaxIovecs;
        MemoryHandle[] pins = PinsFor(buffer);
        bool copy = _copyNextSend;
        _copyNextSend = false;
        if (_zeroCopy && !copy && buffer.Length >= _settings.ZeroCopySendThreshold && (_zeroCopyGather || buffer.IsSingleSegment)
            && (pinSet = RentPinSet(buffer, out fixedBuffer, out segmentLimit)) >= 0)
        {
            pins = _pinSets[pinSet];
        }
        _lastSendZeroCopy = pinSet >= 0;

        iovec single; // a single segment goes in the SQE itself (SEND), so its iovec only lives until then
        iovec* iovecs = buffer.IsSingleSegment ? &single : (iovec*)(_message + 1);
        int count = PinSegments(buffer, pins, iovecs, segmentLimit);

        io_uring_sqe* sqe;
        if (pinSet >= 0)
        {
            _pinSetCounts[pinSet] = count;
            sqe = _owner.Loop.NewSqe(_owner, ConnectionRequestKind.SendZeroCopy, (uint)pinSet);
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
            sqe = _owner.Loop.NewSqe(_owner, ConnectionRequestKind.Send);
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
        return new ValueTask<int>(this, _source.Version);
    }

    /// <summary>Pins the non-empty segments of <paramref name="buffer"/>, up to <paramref name="limit"/> (the rest goes in the next send), and describes them in <paramref name="iovecs"/>.</summary>
    private static unsafe int PinSegments(in ReadOnlySequence<byte> buffer, MemoryHandle[] pins, iovec* iovecs, int limit)
    {
        int count = 0;
        foreach (ReadOnlyMemory<byte> segment in buffer)
        {
            if (segment.IsEmpty)
            {
                continue;
            }
            pins[count] = segment.Pin();
            iovecs[count] = new iovec { iov_base = (nuint)pins[count].Pointer, iov_len = (nuint)segment.Length };
            if (++count == limit)
            {
                break;
            }
        }
        return count;
    }

    private MemoryHandle[] PinsFor(in ReadOnlySequence<byte> buffer)
    {
        if (_pins.Length < MaxIovecs && !(buffer.IsSingleSegment && _pins.Length == 1))
        {
            _pins = new MemoryHandle[buffer.IsSingleSegment ? 1 : MaxIovecs];
        }
        return _pins;
    }

    // ---- direct sends: from the application thread that flushed, while the loop sleeps ----
    //
    // A flush while the loop sleeps would cost a wake-up (an eventfd write, the loop's iteration and its io_uring_enter)
    // for one SEND. Instead Output's reader continuation runs on the flushing thread (Schedule below), and RunAsync sends
    // with a non-blocking send(2)/sendmsg(2) from there, as System.Net.Sockets does. Only the data path goes this way: an
    // end, a cancel, a zero-copy-sized send, or whatever the kernel did not take at once (EAGAIN, a partial send, an
    // error) moves RunAsync to the loop (LoopHop), which goes on as before. RunAsync's state has one owner at a time: the
    // pipe runs one reader continuation at a time, and no ring send is in flight while it runs here.
    // The fd: while RunAsync runs here (_offLoop), a closing connection does not close its fd (UsingFdOffLoop); leaving,
    // this thread posts the close's next step if closing began meanwhile. Both sides write their flag with a full fence
    // before reading the other's, so at least one of them sees both.

    /// <summary>A reader continuation of Output: on the flushing thread when the loop sleeps and the connection is open, else on the loop.</summary>
    public override void Schedule(Action<object?> action, object? state)
    {
        EventLoop loop = _owner.Loop;
        if (_directSends && loop.IsSleeping && Volatile.Read(ref _closing) == 0 && !loop.IsOnLoopThread && TryEnterOffLoop())
        {
            try
            {
                action(state);
            }
            finally
            {
                LeaveOffLoop();
            }
            return;
        }
        loop.Schedule(action, state);
    }

    /// <summary>The connection began closing (loop thread): no direct send starts from now on.</summary>
    public void OnClosing() => Interlocked.Exchange(ref _closing, 1);

    /// <summary>An application thread may be sending on the fd right now: the fd must not be closed yet.</summary>
    public bool UsingFdOffLoop => Volatile.Read(ref _offLoop) != 0;

    private bool TryEnterOffLoop()
    {
        Interlocked.Exchange(ref _offLoop, 1);
        _owner.Loop.OnSenderOffLoop(+1);
        if (Volatile.Read(ref _closing) != 0)
        {
            LeaveOffLoop();
            return false;
        }
        return true;
    }

    private void LeaveOffLoop()
    {
        Interlocked.Exchange(ref _offLoop, 0);
        if (Volatile.Read(ref _closing) != 0)
        {
            // The close may be waiting for this thread to leave the fd. Posted before the count drops, so a stopping
            // loop still runs it.
            _owner.Loop.Schedule(static c => ((IoUringConnection)c!).CheckCloseProgress(), _connection);
        }
        _owner.Loop.OnSenderOffLoop(-1);
    }

    /// <summary>Whether RunAsync may handle <paramref name="result"/> on this application thread (plain data, nothing for zero-copy).</summary>
    private bool CanSendDirectly(in ReadResult result)
        => !result.IsCanceled && !result.IsCompleted && !result.Buffer.IsEmpty && Volatile.Read(ref _closing) == 0
            && !(_zeroCopy && result.Buffer.Length >= _settings.ZeroCopySendThreshold);

    /// <summary>One non-blocking send(2)/sendmsg(2) of <paramref name="buffer"/> (up to <see cref="MaxIovecs"/> segments) on this thread: bytes sent, or -errno.</summary>
    private unsafe int SendDirectly(in ReadOnlySequence<byte> buffer)
    {
        _lastSendZeroCopy = false;
        MemoryHandle[] pins = PinsFor(buffer);
        iovec* iovecs = stackalloc iovec[MaxIovecs];
        int count = PinSegments(buffer, pins, iovecs, MaxIovecs);
        _settings.BeforeDirectSend?.Invoke();
        const int flags = (int)(Libc.MSG_NOSIGNAL | Libc.MSG_DONTWAIT);
        nint result;
        if (count == 1)
        {
            result = Libc.send(_fd, (void*)iovecs[0].iov_base, iovecs[0].iov_len, flags);
        }
        else
        {
            Libc.msghdr message = new() { msg_iov = iovecs, msg_iovlen = (nuint)count };
            result = Libc.sendmsg(_fd, &message, flags);
        }
        int sent = result >= 0 ? (int)result : -Libc.GetLastErrno();
        ReleasePins(pins, count);
        if (sent > 0)
        {
            _bytesSent += sent;
        }
        _owner.Loop.OnDirectSend(sent);
        return sent;
    }

    /// <summary>Awaiting it continues the async method on the loop thread (posted; on the thread pool once the loop stopped).</summary>
    private readonly struct LoopHop(EventLoop loop) : System.Runtime.CompilerServices.ICriticalNotifyCompletion
    {
        public LoopHop GetAwaiter() => this;

        public bool IsCompleted => false;

        public void GetResult()
        {
        }

        public void OnCompleted(Action continuation) => loop.Schedule(static c => ((Action)c!)(), continuation);

        public void UnsafeOnCompleted(Action continuation) => OnCompleted(continuation);
    }

    public void OnSendCompleted(int result)
    {
        ReleasePins(_pins, _pinCount);
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
            return;
        }
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
        }
        Complete(result);
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

    private void Complete(int result)
    {
        if (result > 0)
        {
            _bytesSent += result;
            _owner.Loop.OnBytesSent(result);
        }
        _source.SetResult(result); // continues RunAsync inline, which may queue the next send
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
    /// A free pin set, if every segment to send comes from our pool (whose blocks outlive AdvanceTo while pinned); else -1.
    /// <paramref name="fixedBuffer"/>: the registered buffer the send's segments lie in, or -1. Where they span several
    /// regions but the leading ones in one registered region make at least the threshold (and gathers may be fixed),
    /// only those go (<paramref name="segmentLimit"/>): pages the kernel need not pin, the rest in the next send.
    /// </summary>
    private int RentPinSet(in ReadOnlySequence<byte> buffer, out int fixedBuffer, out int segmentLimit)
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
                continue; // as in SendAsync: counted alike, so segmentLimit means the same there
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

    // IValueTaskSource<int>: the pending send's result; completed inline on the loop thread.
    int IValueTaskSource<int>.GetResult(short token) => _source.GetResult(token);

    ValueTaskSourceStatus IValueTaskSource<int>.GetStatus(short token) => _source.GetStatus(token);

    void IValueTaskSource<int>.OnCompleted(Action<object?> continuation, object? state, short token, ValueTaskSourceOnCompletedFlags flags)
        => _source.OnCompleted(continuation, state, token, flags);
}
