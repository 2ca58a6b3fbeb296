using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The receiving half of an <see cref="IoUringConnection"/>: one multishot RECV that selects buffers from the loop's
/// <see cref="ReceiveBuffers"/>; the loop hands each completion here and its buffers go to <see cref="Input"/> (a
/// <see cref="ConnectionInput"/>, which keeps bulk ones without a copy). Input's backlog is the backpressure: once it
/// reaches the pause threshold receiving pauses (the RECV cancelled), and resumes when the reader has caught up.
/// With a pause threshold, each RECV is armed for no more than Input can take before it pauses, so a paused connection
/// holds at most its threshold plus one ring buffer: a multishot RECV capped at that total where the kernel can cap one
/// (<see cref="IoUringCapabilities.HasReceiveLimit"/>, 6.17+), else a single-shot RECV of that length (an uncapped
/// multishot RECV goes on taking whatever the socket holds until its cancellation takes effect: measured at up to 3.9 MB
/// past a 64 KiB threshold). Single-shot, a receive that leaves bytes in the socket is followed by a vectored RECVMSG
/// into up to 8 spare blocks, and the reader is woken once per such batch (see <see cref="ConnectionInput.Write"/>).
/// </summary>
/// <remarks>
/// <para>Loop thread only. Owns the receive state (armed, paused, ended, backing off) and Input's writer side; it tells the
/// connection when the peer closed, when receiving ended, and when it failed.</para>
/// <para>A multishot RECV can miss a reset (seen on 6.18). When a read leaves the socket empty (a CQE with F_MORE but
/// without F_SOCK_NONEMPTY), the RECV waits for its poll's next wakeup. A FIN counts as not empty, so the RECV goes on to
/// read the EOF; a pending reset error does not, and only a read that finds the socket empty returns it. The reset's own
/// wakeup normally brings that read, but a RECV armed after the RST arrived (on resuming from a backpressure pause, or
/// after ENOBUFS) gets one look at the ready socket, spends it on the bytes queued ahead of the RST (more than it reads
/// at submit: 32 buffers), and then waits forever on the dead socket. So a one-shot POLL_ADD per connection watches for
/// the peer's FIN, reset or a socket error; once it has fired, a RECV that may be waiting is restarted (cancelled, and
/// its ECANCELED re-arms it): the new RECV reads what is left, or finds the socket empty and reports the error.</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class ConnectionReceiver
{
    private const uint PollErr = 0x8, PollHup = 0x10, PollRdHup = 0x2000; // POLLERR and POLLHUP are always reported
    private const int MaxVector = 8; // spare blocks one vectored RECVMSG fills (64 KiB of 8 KiB blocks)

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly ConnectionInput _input;
    private readonly long _pauseThreshold; // Input's pause threshold, which caps each RECV at what Input can take; 0: not capped
    private readonly bool _singleShot;      // no kernel cap: each RECV is single-shot, its length the cap
    private readonly bool _bundles;         // each receive may fill several ring buffers (IORING_RECVSEND_BUNDLE)
    private bool _armed;            // a RECV is in flight (until its final CQE)
    private bool _cancelling;       // that RECV's cancel is in flight too: one is enough
    private bool _paused;           // Input's backlog reached its pause threshold: backpressure
    private bool _ended;            // FIN, error, the reader went away, or closing
    private bool _backingOff;       // a backoff TIMEOUT is in flight: re-arm when it ends
    private bool _peerHungUp;       // the hang-up poll fired: the peer's FIN or reset (or an error) reached the socket
    private bool _hangUpArmed;      // the hang-up poll is in flight
    private bool _armRetryScheduled; // the loop had no SQE for the RECV: MaybeRearm runs again next iteration
    private uint _armedTag;         // the armed RECV's user_data tag: 0, or VectoredTag for the vectored RECVMSG
    private bool _socketNonEmpty;   // single-shot: the last receive left bytes in the socket (arm a vectored one next)
    private unsafe Libc.msghdr* _vectorMessage; // msghdr + MaxVector iovecs of the vectored RECVMSG, made at its first use
    // That RECVMSG's spare blocks (until its CQE) and their lengths, made at its first use like the msghdr: only kernels
    // without the receive cap send it, and ~200 B on every connection showed in the accept storm's allocation (5% over
    // Sockets' per connection).
    private ReceiveBlock[]? _vectorBlocks;
    private int[]? _vectorLengths;
    private int _vectorCount;       // blocks in _vectorBlocks (in flight)
    private int _exhaustionMark = -1; // see ReceiveBuffers.OnExhausted
    private long _bytesReceived;
    private (Action<object?, bool>? Callback, object? State) _backpressureCallback;

    /// <summary>Receives <paramref name="connection"/>'s bytes on <paramref name="fd"/> into a new <see cref="Input"/>, with
    /// <paramref name="owner"/>'s requests; Input pauses receiving at <paramref name="pauseThreshold"/> bytes (null or 0:
    /// never), each RECV capped by what Input can take before that (as a multishot RECV's total where
    /// <paramref name="capabilities"/> allow, else as a single-shot RECV's length).
    /// <paramref name="inlineContinuations"/>: the reader's continuations run on the loop thread.</summary>
    public ConnectionReceiver(IoUringConnection connection, RingOwner owner, int fd, long? pauseThreshold, bool inlineContinuations, IoUringCapabilities capabilities)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _input = new ConnectionInput(this, owner.Loop, pauseThreshold ?? 0, inlineContinuations);
        _pauseThreshold = pauseThreshold ?? 0;
        _singleShot = _pauseThreshold > 0 && !capabilities.HasReceiveLimit;
        // Not with single-shot RECVs: a bundle takes its length as a bound only where the socket's queue length is known
        // (6.15 and 6.16 have bundles but no cap), and the length is what holds the bound there.
        _bundles = capabilities.HasReceiveBundles && !_singleShot;
    }

    /// <summary>What the peer sent (<see cref="IoUringConnection.Input"/>).</summary>
    public ConnectionInput Input => _input;

    /// <summary>FIN, error, the reader went away, or the connection is closing: no more bytes go into Input.</summary>
    public bool Ended => _ended;

    public long BytesReceived => Volatile.Read(ref _bytesReceived);

    /// <summary>See <see cref="IoUringConnection.OnBackpressure"/>. Loop thread.</summary>
    public void SetBackpressureCallback(Action<object?, bool> callback, object? state) => _backpressureCallback = (callback, state);

    /// <summary>Arms the RECV (unless paused, ended or closing).</summary>
    public void Start() => MaybeRearm();

    /// <summary>Arms the one-shot poll that notices the peer's FIN or reset (see the class remarks).</summary>
    public unsafe void ArmHangUpPoll()
    {
        if (_hangUpArmed || _connection.IsClosing || _owner.Loop.IsStopping)
        {
            return; // a retry that came after the close began, or after the stop's cancel-all
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.HangUpPoll);
        if (sqe == null)
        {
            // No SQE (the SQ stayed full after an early submit): again next iteration, so starting a connection cannot throw.
            _owner.Loop.RetryNextIteration(this, static r => r.ArmHangUpPoll());
            return;
        }
        sqe->opcode = IORING_OP_POLL_ADD;
        sqe->fd = _fd;
        sqe->poll32_events = PollRdHup;
        _hangUpArmed = true;
    }

    /// <summary>
    /// Closing: cancels each of this side's requests in flight by its user_data (a cancel by fd would make the kernel walk
    /// every pending request of the ring: a cost that grows with the loop's open connections).
    /// </summary>
    /// <returns>False when the loop had no SQE for one of them: call again.</returns>
    public bool CancelForClose()
    {
        bool submitted = Cancel();
        if (_hangUpArmed)
        {
            submitted &= _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.HangUpPoll));
        }
        if (_backingOff)
        {
            // A TIMEOUT: no fd, but it would hold the close 10 ms.
            submitted &= _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.ReceiveBackoff));
        }
        return submitted;
    }

    /// <summary>The connection is closing (its requests are being cancelled): Input ends with <paramref name="reason"/>.</summary>
    public void OnClosing(Exception? reason)
    {
        _ended = true;
        _input.CompleteWriter(reason);
    }

    /// <summary>Input's reader completed while receiving was paused (posted by <see cref="ConnectionInput.Complete"/>).</summary>
    public void OnInputReaderGone()
    {
        if (_paused)
        {
            _paused = false;
            RaiseBackpressure(paused: false);
        }
        OnReaderGone();
    }

    /// <summary>Input's backlog fell below its resume threshold (posted by the reader): receive again, unless it paused since.</summary>
    public void OnInputResumed()
    {
        if (!_paused || _input.WriterPaused)
        {
            return;
        }
        _paused = false;
        RaiseBackpressure(paused: false);
        MaybeRearm();
    }

    /// <summary>The application will read no more: stop receiving; the connection stays open for sending.</summary>
    public void OnReaderGone()
    {
        if (_ended || _connection.IsClosing)
        {
            return; // already ended (FIN, error, or an earlier call): the connection was told then
        }
        _ended = true;
        _connection.OnDirectionEnded(); // closes now if sending ended too, which cancels the receive with the rest
        if (!_connection.IsClosing)
        {
            CancelOrRetry();
        }
    }

    public void OnReceive(ReceivedBytes data, uint flags)
    {
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
            _cancelling = false;
        }
        // Single-shot, with bytes still in the socket: the next RECV (armed below) completes at once with more, so the
        // reader need not wake for these alone (the batch a multishot RECV delivers in one iteration).
        bool moreFollows = _singleShot && (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        OnBytes(_ended ? ConnectionInput.InputWrite.Accepted : _input.Write(data, moreFollows), data.Length, flags, moreFollows);
    }

    /// <summary>The vectored RECVMSG's completion (see <see cref="TryArmVectored"/>): its bytes are in its spare blocks.</summary>
    public void OnVectoredReceive(int result, uint flags)
    {
        _armed = false;
        _cancelling = false;
        int count = _vectorCount;
        _vectorCount = 0;
        if (result <= 0)
        {
            ReturnVectorBlocks(count);
            OnReceiveEnded(result, flags);
            return;
        }
        bool moreFollows = (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        // WriteBlocks takes or returns every block (dropping the bytes once the reader is gone).
        ConnectionInput.InputWrite written = _input.WriteBlocks(_vectorBlocks.AsSpan(0, count), _vectorLengths.AsSpan(0, count), _ended ? 0 : result, moreFollows);
        _vectorBlocks.AsSpan(0, count).Clear();
        OnBytes(_ended ? ConnectionInput.InputWrite.Accepted : written, result, flags, moreFollows);
    }

    // After a receive's bytes went to Input (single-shot: moreFollows when the socket still holds some).
    private void OnBytes(ConnectionInput.InputWrite written, int length, uint flags, bool moreFollows)
    {
        _socketNonEmpty = moreFollows;
        if (!_ended)
        {
            switch (written)
            {
                case ConnectionInput.InputWrite.Paused when !_paused:
                    // Backpressure: stop receiving until the reader catches up. Data already on its way still lands in Input.
                    _paused = true;
                    RaiseBackpressure(paused: true);
                    CancelOrRetry();
                    break;
                case ConnectionInput.InputWrite.ReaderGone:
                    OnReaderGone();
                    break;
            }
        }
        _bytesReceived += length;
        _owner.Loop.OnBytesReceived(length);
        MaybeRearm();
        if (moreFollows && !_armed)
        {
            _input.WakeReader(); // no RECV follows at once (paused, ended, closing, or no SQE): what Input holds is all for now
        }
        if (_peerHungUp && (flags & (IORING_CQE_F_MORE | IORING_CQE_F_SOCK_NONEMPTY)) == IORING_CQE_F_MORE)
        {
            RestartWaiting(); // it emptied the socket and now waits for a wakeup
        }
    }

    /// <summary>A RECV completion without bytes: the peer's FIN, or an error.</summary>
    public void OnReceiveEnded(int result, uint flags)
    {
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
            _cancelling = false;
        }
        if (_singleShot)
        {
            _socketNonEmpty = false;
            _input.WakeReader(); // the RECV the last bytes were held for brought none (ENOBUFS, cancelled, an error)
        }
        switch (-result)
        {
            case 0:
                // The peer's FIN: the input ends cleanly; sending goes on until the application completes Output.
                _connection.NotifyPeerClosed(reset: false);
                End(null);
                break;
            case Errno.ENOBUFS:
                // Every ring buffer was taken. Those given back are published before the next submit, so re-arm at
                // once; but if none came back since this connection's last ENOBUFS, a re-arm would fail again at once
                // (a busy loop): wait a little first.
                if (_owner.Loop.ReceiveBuffers.OnExhausted(ref _exhaustionMark))
                {
                    MaybeRearm();
                }
                else
                {
                    BackOff();
                }
                break;
            case Errno.EAGAIN:
            case Errno.EINTR:
                MaybeRearm(); // transient: nothing was received, try again
                break;
            case Errno.ECANCELED:
                MaybeRearm(); // cancelled for backpressure or close; re-arms only if neither holds any more
                break;
            case Errno.ECONNRESET:
                _connection.NotifyPeerClosed(reset: true);
                _connection.Fail(_connection.Settings.CreateResetException("Connection reset by peer."));
                break;
            default:
                // Abortive, so the peer sees a reset rather than a FIN that would pass for a complete stream.
                _connection.Fail(new IOException($"Receive failed: {IoUringException.ErrnoName(-result)}.", SocketErrors.FromErrno(-result)));
                break;
        }
    }

    public void OnHangUp(int result)
    {
        _hangUpArmed = false;
        if (result <= 0)
        {
            return; // cancelled at close
        }
        _peerHungUp = true;
        if (((uint)result & (PollErr | PollHup)) != 0)
        {
            RestartWaiting(); // a reset or an error; a FIN alone the RECV sees by itself
        }
    }

    // The backoff TIMEOUT's CQE: it expired, or was cancelled (closing or the loop stopping, which MaybeRearm checks).
    public void OnBackoffEnded()
    {
        _backingOff = false;
        MaybeRearm();
    }

    private bool CanArm => !_armed && !_backingOff && !_paused && !_ended && !_connection.IsClosing && !_owner.Loop.IsStopping;

    private unsafe void MaybeRearm()
    {
        if (CanArm && !_armRetryScheduled)
        {
            if (_singleShot && _socketNonEmpty && TryArmVectored())
            {
                return;
            }
            io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Receive);
            if (sqe == null)
            {
                RetryArmLater();
                return;
            }
            sqe->opcode = IORING_OP_RECV;
            sqe->fd = _fd;
            sqe->ioprio = (ushort)((_singleShot ? 0 : IORING_RECV_MULTISHOT) | (_bundles ? IORING_RECVSEND_BUNDLE : 0));
            sqe->flags = IOSQE_BUFFER_SELECT;
            sqe->buf_group = _owner.Loop.ReceiveBuffers.GroupId;
            if (_singleShot)
            {
                sqe->len = ReceiveLimit(); // at most this many bytes; 0: one buffer (or bundle), when Input holds its threshold already
            }
            else if (_pauseThreshold > 0)
            {
                sqe->optlen = ReceiveLimit(); // the multishot RECV's total; 0: no cap, when Input holds its threshold already
            }
            _armed = true;
            _armedTag = 0;
        }
    }

    // The SQ stayed full after an early submit (or the ring is gone): try again next iteration. Single-shot RECVs re-arm
    // after every receive, so this must not end the connection.
    private void RetryArmLater()
    {
        _armRetryScheduled = true;
        _owner.Loop.Schedule(s_retryArm, this);
    }

    /// <summary>
    /// Single-shot, when the last receive left bytes in the socket: one RECVMSG into up to <see cref="MaxVector"/> spare
    /// blocks (at most what Input can still take), so a bulk receive takes 64 KiB per request instead of one ring buffer,
    /// as a bundle would (kernels without the receive cap have no usable bundles). It completes at once (the bytes are
    /// there), so no idle connection holds blocks for it; the blocks stay the receiver's until its CQE, also when cancelled.
    /// False when it was not armed (too little room, or no block or SQE): arm a plain RECV.
    /// </summary>
    private unsafe bool TryArmVectored()
    {
        ReceiveBlockPool spares = _owner.Loop.ReceiveBuffers.Spares;
        int blockSize = spares.BlockSize;
        long limit = ReceiveLimit();
        if (limit <= blockSize)
        {
            return false; // one ring buffer holds it
        }
        int count = (int)Math.Min(MaxVector, (limit + blockSize - 1) / blockSize);
        _vectorBlocks ??= new ReceiveBlock[MaxVector];
        _vectorLengths ??= new int[MaxVector];
        int rented = 0;
        try
        {
            for (; rented < count; rented++)
            {
                _vectorBlocks[rented] = spares.Rent();
            }
        }
        catch (OutOfMemoryException)
        {
            ReturnVectorBlocks(rented);
            return false;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Receive, ConnectionRequestKind.VectoredTag);
        if (sqe == null)
        {
            ReturnVectorBlocks(count);
            RetryArmLater();
            return true; // nothing armed, but the retry is scheduled
        }
        if (_vectorMessage == null)
        {
            _vectorMessage = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxVector * sizeof(iovec)));
        }
        var iovecs = (iovec*)(_vectorMessage + 1);
        for (int i = 0; i < count; i++)
        {
            int length = (int)Math.Min(blockSize, limit);
            limit -= length;
            iovecs[i] = new iovec { iov_base = (nuint)_vectorBlocks[i].Address, iov_len = (nuint)length };
            _vectorLengths[i] = length;
        }
        *_vectorMessage = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
        sqe->opcode = IORING_OP_RECVMSG;
        sqe->fd = _fd;
        sqe->addr = (ulong)_vectorMessage;
        sqe->len = 1;
        _vectorCount = count;
        _armed = true;
        _armedTag = ConnectionRequestKind.VectoredTag;
        return true;
    }

    private void ReturnVectorBlocks(int count)
    {
        for (int i = 0; i < count; i++)
        {
            _owner.Loop.ReceiveBuffers.Spares.Return(_vectorBlocks![i]);
            _vectorBlocks[i] = default;
        }
    }

    /// <summary>Frees the vectored RECVMSG's msghdr: once nothing of the connection is in flight (the owner is freed).</summary>
    public unsafe void FreeNativeMemory()
    {
        if (_vectorMessage != null)
        {
            NativeMemory.Free(_vectorMessage);
            _vectorMessage = null;
        }
    }

    private static readonly Action<object?> s_retryArm = static r =>
    {
        var receiver = (ConnectionReceiver)r!;
        receiver._armRetryScheduled = false;
        if (receiver._owner.Loop.IsOnLoopThread)
        {
            receiver.MaybeRearm();
        }
    };

    /// <summary>
    /// What Input can still take before it pauses: the RECV ends by itself (a CQE without F_MORE) after that many bytes,
    /// and is armed again with what is left then; a receive fills at most one ring buffer past it. 0 (no cap) when Input
    /// already holds its threshold without pausing: its reader asked for more than that (ReadAtLeastAsync), and a cap
    /// of one buffer would make every receive single-shot until it has it. At most int.MaxValue: the kernel takes
    /// either as an int.
    /// </summary>
    private uint ReceiveLimit()
    {
        long room = _pauseThreshold - _input.Unconsumed;
        return room > 0 ? (uint)Math.Min(room, int.MaxValue) : 0;
    }

    /// <returns>False when the RECV needed a cancel and the loop had no SQE for it.</returns>
    private bool Cancel()
    {
        if (_armed && !_cancelling)
        {
            _cancelling = _connection.CancelRequest(_owner.UserDataOf(ConnectionRequestKind.Receive, _armedTag));
            return _cancelling;
        }
        return true;
    }

    // The armed RECV may be waiting for a wakeup that will not come: cancel it; its ECANCELED arms a new one.
    private void RestartWaiting()
    {
        if (_armed && !_paused && !_ended && !_connection.IsClosing)
        {
            CancelOrRetry();
        }
    }

    /// <summary>
    /// Cancels the RECV for a pause, the reader gone or a restart; if the loop has no SQE for it (the SQ still full after
    /// an early submit), tries again next iteration for as long as the cancel is still wanted: without it a paused
    /// connection would go on receiving where the kernel cannot cap the RECV, or a reset stay unseen.
    /// </summary>
    private void CancelOrRetry()
    {
        if (!Cancel())
        {
            _owner.Loop.Schedule(s_retryCancel, this);
        }
    }

    private static readonly Action<object?> s_retryCancel = static r => ((ConnectionReceiver)r!).RetryCancel();

    private void RetryCancel()
    {
        if (_owner.Loop.IsOnLoopThread && !_connection.IsClosing && (_paused || _ended || _peerHungUp))
        {
            CancelOrRetry(); // Cancel itself does nothing if the RECV ended or its cancel went meanwhile
        }
    }

    private unsafe void BackOff()
    {
        if (!CanArm)
        {
            return;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.ReceiveBackoff);
        if (sqe == null)
        {
            // No SQE for the pause: back off again next iteration (the connection must not fail for it, nor the receive spin).
            _owner.Loop.RetryNextIteration(this, static r => r.BackOff());
            return;
        }
        ReceiveBackoff.Prepare(sqe);
        _backingOff = true;
    }

    private void RaiseBackpressure(bool paused)
    {
        if (_backpressureCallback is var (callback, state) && callback is not null)
        {
            callback(state, paused);
        }
    }

    private void End(Exception? error)
    {
        if (_ended)
        {
            return;
        }
        _ended = true;
        _input.CompleteWriter(error);
        _connection.OnDirectionEnded();
    }
}
