using System.Diagnostics;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The receiving half of an <see cref="IoUringConnection"/>: a RECV that selects buffers from the loop's
/// <see cref="ReceiveBuffers"/> and hands their bytes to <see cref="Input"/>; it pauses (the RECV cancelled) at
/// Input's pause threshold. Loop thread only.
/// </summary>
/// <remarks>
/// <para>Each RECV is capped at what Input can still take: multishot where the kernel has the cap
/// (<see cref="IoUringCapabilities.HasReceiveLimit"/>), else single-shot, followed by a vectored RECVMSG while bytes
/// remain (BackpressureTests.A_slow_reader_is_never_further_behind_than_the_bound).</para>
/// <para>A multishot RECV armed after a reset can wait for ever on the dead socket, so a one-shot hang-up POLL_ADD
/// restarts it (ReceiveResetTests.A_reset_while_paused_by_backpressure_...).</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionReceiver
{
    private const uint PollErr = 0x8, PollHup = 0x10, PollRdHup = 0x2000; // POLLERR and POLLHUP are always reported

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly ConnectionInput _input;
    private readonly long _pauseThreshold;  // caps each RECV at what Input can take; 0: not capped
    private readonly bool _singleShot;      // no kernel cap: each RECV is single-shot, its length the cap
    private readonly bool _bundles;         // each receive may fill several ring buffers (IORING_RECVSEND_BUNDLE)
    private ReceiveRequestState _request;
    private uint _armedTag;                 // the armed RECV's user_data tag: 0, or VectoredTag for the RECVMSG
    private HangUpPollState _hangUp;
    private bool _paused;                   // Input's backlog reached its pause threshold: backpressure
    private bool _ended;                    // FIN, error, the reader went away, or closing (never cleared)
    private bool _armRetryScheduled;        // the loop had no SQE for the RECV: MaybeRearm runs again next iteration
    private bool _socketNonEmpty;           // single-shot: the last receive left bytes in the socket
    private VectoredReceiveBuffers _vectored; // mutable struct: never readonly
    private int _exhaustionMark = -1;       // see ReceiveBuffers.OnExhausted
    private long _bytesReceived;
    private (Action<object?, bool>? Callback, object? State) _backpressureCallback;

    /// <summary><paramref name="pauseThreshold"/>: null or 0 for never.</summary>
    public ConnectionReceiver(IoUringConnection connection, RingOwner owner, int fd, long? pauseThreshold,
        bool inlineContinuations, IoUringCapabilities capabilities)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _input = new ConnectionInput(this, owner.Loop, pauseThreshold ?? 0, inlineContinuations);
        _pauseThreshold = pauseThreshold ?? 0;
        _singleShot = _pauseThreshold > 0 && !capabilities.HasReceiveLimit;
        // Single-shot RECVs hold the bound by their length, which a bundle honours only where the socket's queue
        // length is known.
        _bundles = capabilities.HasReceiveBundles && !_singleShot;
    }

    public ConnectionInput Input => _input;

    /// <summary>FIN, error, the reader went away, or the connection is closing: no more bytes go into Input.</summary>
    public bool Ended => _ended;

    public long BytesReceived => Volatile.Read(ref _bytesReceived);

    /// <summary>See <see cref="IoUringConnection.OnBackpressure"/>. Loop thread.</summary>
    public void SetBackpressureCallback(Action<object?, bool> callback, object? state)
        => _backpressureCallback = (callback, state);

    public void Start() => MaybeRearm();

    private bool IsReceiving => _request is ReceiveRequestState.Armed or ReceiveRequestState.Cancelling;

    private bool CanArm => _request == ReceiveRequestState.None && !_paused && !_ended && !_connection.IsClosing
        && !_owner.Loop.IsStopping;

    // ---- Arming ----

    private unsafe void MaybeRearm()
    {
        if (CanArm && !_armRetryScheduled)
        {
            Debug.Assert(_owner.Loop.IsOnLoopThread, "a RECV armed off the loop thread");
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
            sqe->buf_group = _owner.Loop.ReceiveBuffers.UseGroup();
            if (_singleShot)
            {
                sqe->len = ReceiveLimit(); // 0: one buffer (or bundle), when Input holds its threshold already
            }
            else if (_pauseThreshold > 0)
            {
                sqe->optlen = ReceiveLimit(); // the multishot RECV's total; 0: no cap
            }
            OnArmed(tag: 0);
        }
    }

    private void OnArmed(uint tag)
    {
        Debug.Assert(_request == ReceiveRequestState.None, "a receive armed while one is in flight");
        _request = ReceiveRequestState.Armed;
        _armedTag = tag;
    }

    // No SQE: again next iteration, never failing the connection.
    private void RetryArmLater()
    {
        Debug.Assert(!_armRetryScheduled, "a second arm retry");
        _armRetryScheduled = true;
        _owner.Loop.Schedule(s_retryArm, this);
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
    /// Single-shot with bytes left in the socket: one RECVMSG into several spare blocks, as a bundle would. It
    /// completes at once, so no idle connection holds blocks for it. False: arm a RECV instead.
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
        int count = (int)Math.Min(VectoredReceiveBuffers.MaxBlocks, (limit + blockSize - 1) / blockSize);
        if (!_vectored.TryRent(spares, count))
        {
            return false;
        }
        io_uring_sqe* sqe = _owner.Loop.TryNewSqe(_owner, ConnectionRequestKind.Receive,
            ConnectionRequestKind.VectoredTag);
        if (sqe == null)
        {
            _vectored.Return(spares, count);
            RetryArmLater();
            return true; // nothing armed, but the retry is scheduled
        }
        sqe->opcode = IORING_OP_RECVMSG;
        sqe->fd = _fd;
        // SAFETY: the msghdr is freed with the owner (FreeNativeMemory); the pinned blocks stay ours until this CQE,
        // also when cancelled.
        sqe->addr = (ulong)_vectored.Prepare(count, blockSize, limit);
        sqe->len = 1;
        OnArmed(ConnectionRequestKind.VectoredTag);
        return true;
    }

    /// <summary>Once nothing of the connection is in flight.</summary>
    public void FreeNativeMemory() => _vectored.FreeNativeMemory();

    /// <summary>
    /// What Input can take before it pauses. 0 (no cap) when it holds its threshold already (a ReadAtLeastAsync wants
    /// more): a one-buffer cap would make every receive single-shot. The kernel takes it as an int.
    /// </summary>
    private uint ReceiveLimit()
    {
        long room = _pauseThreshold - _input.Unconsumed;
        return room > 0 ? (uint)Math.Min(room, int.MaxValue) : 0;
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
            // Again next iteration: the connection must not fail for it, nor the receive spin.
            _owner.Loop.RetryNextIteration(this, static r => r.BackOff());
            return;
        }
        ReceiveBackoff.Prepare(sqe);
        Debug.Assert(_request == ReceiveRequestState.None, "a backoff TIMEOUT while a receive is in flight");
        _request = ReceiveRequestState.BackingOff;
    }

    // The backoff expired, or was cancelled (closing, or the loop stopping: MaybeRearm checks).
    public void OnBackoffEnded()
    {
        Debug.Assert(_request == ReceiveRequestState.BackingOff, "a backoff completion without its TIMEOUT");
        _request = ReceiveRequestState.None;
        MaybeRearm();
    }

    // ---- Completions ----

    public void OnReceive(ReceivedBytes data, uint flags)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        Debug.Assert(IsReceiving && _armedTag == 0, "a RECV completion without a RECV in flight");
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _request = ReceiveRequestState.None;
        }
        // Single-shot with bytes still in the socket: the next RECV completes at once, so the reader need not wake yet.
        bool moreFollows = _singleShot && (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        OnBytes(_ended ? InputWrite.Accepted : _input.Write(data, moreFollows), data.Length, flags, moreFollows);
    }

    public void OnVectoredReceive(int result, uint flags)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        Debug.Assert(IsReceiving && _armedTag == ConnectionRequestKind.VectoredTag,
            "a RECVMSG completion without a RECVMSG in flight");
        _request = ReceiveRequestState.None;
        int count = _vectored.TakeInFlight();
        if (result <= 0)
        {
            _vectored.Return(_owner.Loop.ReceiveBuffers.Spares, count);
            OnReceiveEnded(result, flags);
            return;
        }
        bool moreFollows = (flags & IORING_CQE_F_SOCK_NONEMPTY) != 0;
        // WriteBlocks takes or returns every block (dropping the bytes once the reader is gone).
        InputWrite written = _input.WriteBlocks(_vectored.Blocks(count), _vectored.Lengths(count),
            _ended ? 0 : result, moreFollows);
        _vectored.Blocks(count).Clear();
        OnBytes(_ended ? InputWrite.Accepted : written, result, flags, moreFollows);
    }

    private void OnBytes(InputWrite written, int length, uint flags, bool moreFollows)
    {
        _socketNonEmpty = moreFollows;
        if (!_ended)
        {
            switch (written)
            {
                case InputWrite.Paused when !_paused:
                    // Bytes on their way still land in Input.
                    _paused = true;
                    RaiseBackpressure(paused: true);
                    CancelOrRetry();
                    break;
                case InputWrite.ReaderGone:
                    OnReaderGone();
                    break;
            }
        }
        _bytesReceived += length;
        _owner.Loop.OnBytesReceived(length);
        MaybeRearm();
        if (moreFollows && !IsReceiving)
        {
            _input.WakeReader(); // no RECV follows at once (paused, ended, closing, or no SQE): that is all for now
        }
        if (_hangUp == HangUpPollState.PeerHungUp
            && (flags & (IORING_CQE_F_MORE | IORING_CQE_F_SOCK_NONEMPTY)) == IORING_CQE_F_MORE)
        {
            RestartWaiting(); // it emptied the socket and now waits for a wakeup
        }
    }

    /// <summary>A RECV completion without bytes: the peer's FIN, or an error.</summary>
    public void OnReceiveEnded(int result, uint flags)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _request = ReceiveRequestState.None;
        }
        if (_singleShot)
        {
            _socketNonEmpty = false;
            _input.WakeReader(); // the RECV the last bytes were held for brought none (ENOBUFS, cancelled, an error)
        }
        switch (-result)
        {
            case 0:
                // The peer's FIN: sending goes on until the application completes Output.
                _connection.NotifyPeerClosed(reset: false);
                End(null);
                break;
            case Errno.ENOBUFS:
                // No ring buffer: re-arm at once if some came back since this connection's last ENOBUFS, else back off.
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
                _connection.Fail(new IOException($"Receive failed: {IoUringException.ErrnoName(-result)}.",
                    SocketErrors.FromErrno(-result)));
                break;
        }
    }
}
