using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// A listener's ACCEPT on one loop (multishot unless <see cref="IoUringNetworkOptions.MultishotAccept"/> is off);
/// connections are dealt to the listener's loops in turn. Paused while the listener's queue is full, backs off when
/// fds run out, never re-armed once the listening socket is broken.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed unsafe class Acceptor : RingOwner
{
    private const uint KindAccept = 1;
    private const uint KindCancel = 2;
    private const uint KindBackoff = 3;
    private static readonly TimeSpan s_backoff = TimeSpan.FromMilliseconds(50);
    private static readonly Action<object?> s_startHandedOff = static a => ((Acceptor)a!).StartHandedOff();

    // accept(2) errnos not in Errno: per-connection ones (retry at once) and a broken listening socket.
    private const int ENONET = 64, EPROTO = 71, ENOTSOCK = 88, ENOPROTOOPT = 92, ENETDOWN = 100, ENETUNREACH = 101;
    private const int ECONNABORTED = 103, EHOSTDOWN = 112, EHOSTUNREACH = 113;

    private readonly IoUringListener _listener;
    private readonly int _listenFd;
    private readonly ConnectionSettings _settings;
    private __kernel_timespec* _backoff;    // the backoff TIMEOUT's argument; freed once nothing is in flight
    private bool _stopped;
    private bool _failed;                   // the listening socket is broken: never re-arm
    private Request _request;               // at most one of the ACCEPT (and its cancel) or the backoff TIMEOUT
    private int _paused;                    // 1 while the listener's queue is full; cleared by it (any thread)

    private readonly bool _isTcp;
    // fds other loops accepted for this one
    private readonly System.Collections.Concurrent.ConcurrentQueue<int> _handedOff = new();

    private enum Request
    {
        None,
        Accepting,
        Cancelling, // the ACCEPT is still armed until its last completion
        BackingOff,
    }

    public Acceptor(EventLoop loop, IoUringListener listener, int listenFd, bool isTcp, ConnectionSettings settings)
        : base(loop)
    {
        _isTcp = isTcp;
        _listener = listener;
        _listenFd = listenFd;
        _settings = settings;
    }

    /// <summary>Accepts that failed for lack of fds (tests and counters).</summary>
    public int FdExhaustions { get; private set; }

    /// <summary>ACCEPT requests submitted (tests: one per loop with multishot, one per connection without).</summary>
    public int AcceptRequests { get; private set; }

    public void Start()
    {
        _backoff = (__kernel_timespec*)NativeMemory.AllocZeroed((nuint)sizeof(__kernel_timespec));
        _backoff->tv_nsec = s_backoff.Ticks * 100;
        Arm();
    }

    private void Arm()
    {
        if (_stopped || _failed || _request != Request.None || Volatile.Read(ref _paused) != 0 || Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = Loop.TryNewSqe(this, KindAccept);
        if (sqe == null)
        {
            Loop.RetryNextIteration(this, static a => a.Arm()); // no SQE: without a retry nothing would ever re-arm it
            return;
        }
        sqe->opcode = IORING_OP_ACCEPT;
        sqe->fd = _listenFd;
        sqe->ioprio = _settings.MultishotAccept ? IORING_ACCEPT_MULTISHOT : (ushort)0;
        sqe->accept_flags = Libc.SOCK_CLOEXEC;
        AcceptRequests++;
        _request = Request.Accepting;
    }

    /// <summary>The listener's queue is full: stop taking connections (the kernel's backlog holds them).</summary>
    private void Pause()
    {
        Loop.AssertOnLoopThread();
        Interlocked.Exchange(ref _paused, 1); // full fence: published before the queue length is read again
        if (_listener.HasRoomToResume())
        {
            // the application took some in between and may have looked before the flag was set
            Interlocked.Exchange(ref _paused, 0);
            return;
        }
        CancelAccept();
    }

    /// <summary>Any thread: the listener's queue has room again.</summary>
    internal void Resume()
    {
        if (Interlocked.CompareExchange(ref _paused, 0, 1) != 1)
        {
            return;
        }
        try
        {
            Loop.Post(static a => ((Acceptor)a!).Arm(), this);
        }
        catch (ObjectDisposedException)
        {
            // the loop has stopped: nothing to accept on
        }
    }

    private void CancelAccept()
    {
        if (_request == Request.Accepting && !Loop.IsStopping) // a stopping loop cancels everything itself
        {
            io_uring_sqe* sqe = Loop.TryNewSqe(this, KindCancel);
            if (sqe == null)
            {
                // No SQE: again next iteration; throwing would drop the connection just accepted.
                Loop.RetryNextIteration(this, static a =>
                {
                    if (a._stopped || a._failed || Volatile.Read(ref a._paused) != 0)
                    {
                        a.CancelAccept();
                    }
                });
                return;
            }
            Loop.AssertOnLoopThread();
            sqe->opcode = IORING_OP_ASYNC_CANCEL;
            sqe->addr = UserDataOf(KindAccept);
            _request = Request.Cancelling;
        }
    }

    public void Stop()
    {
        if (_stopped)
        {
            return;
        }
        _stopped = true;
        CancelAccept();
        // The backoff timeout (if any) is short; it completes by itself.
        Release();
    }

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        Loop.AssertOnLoopThread();
        if (kind == KindBackoff)
        {
            Debug.Assert(_request == Request.BackingOff, $"a backoff TIMEOUT completed while {_request}");
            _request = Request.None;
            Arm();
            return;
        }
        if (kind != KindAccept)
        {
            return;
        }
        bool more = (flags & IORING_CQE_F_MORE) != 0;
        Debug.Assert(_request is Request.Accepting or Request.Cancelling, $"an ACCEPT completed while {_request}");
        if (!more)
        {
            _request = Request.None;
        }
        if (result >= 0)
        {
            if (_stopped)
            {
                _ = Libc.close(result); // raced with the stop: nobody will accept it
                return;
            }
            if (_listener.OnAccepted())
            {
                Pause();
            }
            HandOff(result);
            if (!more)
            {
                Arm();
            }
            return;
        }
        switch (-result)
        {
            case Errno.ECANCELED:
                Arm(); // cancelled for a pause that has ended since, or for a stop (Arm does nothing then)
                break;
            case Errno.EAGAIN:
            case Errno.EINTR:
            case Errno.EPERM: // a firewall rule refused the connection
            case ECONNABORTED:
            case EPROTO:
            case ENETDOWN:
            case ENOPROTOOPT:
            case EHOSTDOWN:
            case ENONET:
            case EHOSTUNREACH:
            case ENETUNREACH:
                // accept(2) passes on the one connection's pending network error; the listener goes on.
                if (!more)
                {
                    Arm();
                }
                break;
            case Errno.EINVAL:
            case Errno.EBADF:
            case ENOTSOCK:
                // The listening socket is broken (EINVAL: no longer listens): re-arming would fail forever.
                _failed = true;
                CancelAccept();
                _listener.OnAcceptFailed(-result);
                break;
            case Errno.EMFILE:
            case Errno.ENFILE:
            case Errno.ENOBUFS:
            case Errno.ENOMEM:
                // Out of fds or memory: existing connections keep being served; try again after a pause.
                FdExhaustions++;
                BackOff(more);
                break;
            default:
                // unknown (EOPNOTSUPP is also a connection's pending error): retry, not in a spin
                BackOff(more);
                break;
        }
    }

    private void BackOff(bool more)
    {
        if (!more && !_stopped && _request == Request.None)
        {
            io_uring_sqe* sqe = Loop.TryNewSqe(this, KindBackoff);
            if (sqe == null)
            {
                // no SQE: nothing else would re-arm the accept
                Loop.RetryNextIteration(this, static a => a.BackOff(more: false));
                return;
            }
            Debug.Assert(_backoff != null, "backoff TIMEOUT without its timespec");
            sqe->opcode = IORING_OP_TIMEOUT;
            // SAFETY: _backoff is freed in OnFreed, once the acceptor has no request in flight.
            sqe->addr = (ulong)_backoff;
            sqe->len = 1;
            _request = Request.BackingOff;
        }
    }

    /// <summary>The kernel hands connections to whichever ACCEPT it finds first, which would leave them all on one
    /// loop.</summary>
    private void HandOff(int fd)
    {
        Acceptor target = _listener.NextAcceptor();
        if (target == this)
        {
            StartConnection(fd);
            return;
        }
        // the post carries only the target: nothing allocated per connection
        target._handedOff.Enqueue(fd);
        try
        {
            target.Loop.Post(s_startHandedOff, target);
        }
        catch (ObjectDisposedException)
        {
            // That loop has stopped: serve one of its queued fds here (this one, or one the other loop queued first).
            if (target._handedOff.TryDequeue(out int queued))
            {
                StartConnection(queued);
            }
        }
    }

    private void StartHandedOff()
    {
        if (_handedOff.TryDequeue(out int fd))
        {
            StartConnection(fd);
        }
    }

    private void StartConnection(int fd)
    {
        if (Loop.IsStopping || !Loop.IsOnLoopThread)
        {
            _ = Libc.close(fd); // reached a loop on its way out: nobody will serve it
            _listener.OnDropped();
            return;
        }
        var connection = new IoUringConnection(Loop, fd, _isTcp, _settings);
        // TCP_NODELAY inherited from the listening socket; receiving starts when the application accepts it
        connection.Start(noDelayInherited: true, receive: false, _listener.AcceptedLocalEndPoint);
        _listener.Enqueue(connection);
    }

    internal override void OnFreed()
    {
        NativeMemory.Free(_backoff);
        _backoff = null;
        _listener.OnAcceptorFreed();
    }
}
