using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// A listener's multishot ACCEPT on one loop. Accepted connections are dealt to the listener's loops in turn. The request is re-armed
/// whenever a CQE comes without F_MORE; when fds run out (EMFILE/ENFILE) it backs off with a timeout instead of spinning.
/// </summary>
internal sealed unsafe class Acceptor : RingOwner
{
    private const uint KindAccept = 1;
    private const uint KindCancel = 2;
    private const uint KindBackoff = 3;
    private static readonly TimeSpan s_backoff = TimeSpan.FromMilliseconds(50);

    private readonly IoUringListener _listener;
    private readonly int _listenFd;
    private readonly ConnectionSettings _settings;
    private __kernel_timespec* _backoff;    // the backoff TIMEOUT's argument; freed once nothing is in flight
    private bool _stopped;
    private bool _acceptArmed;

    private readonly bool _isTcp;

    public Acceptor(EventLoop loop, IoUringListener listener, int listenFd, bool isTcp, ConnectionSettings settings) : base(loop)
    {
        _isTcp = isTcp;
        _listener = listener;
        _listenFd = listenFd;
        _settings = settings;
    }

    /// <summary>Accept calls that failed for lack of fds (for tests and counters).</summary>
    public int FdExhaustions { get; private set; }

    public void Start()
    {
        _backoff = (__kernel_timespec*)NativeMemory.AllocZeroed((nuint)sizeof(__kernel_timespec));
        _backoff->tv_nsec = s_backoff.Ticks * 100;
        Arm();
    }

    private void Arm()
    {
        if (_stopped || Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = Loop.GetSqe(this, KindAccept);
        sqe->opcode = IORING_OP_ACCEPT;
        sqe->fd = _listenFd;
        sqe->ioprio = IORING_ACCEPT_MULTISHOT;
        sqe->accept_flags = Libc.SOCK_CLOEXEC;
        _acceptArmed = true;
    }

    public void Stop()
    {
        if (_stopped)
        {
            return;
        }
        _stopped = true;
        if (_acceptArmed && !Loop.IsStopping) // a stopping loop cancels everything itself
        {
            io_uring_sqe* sqe = Loop.GetSqe(this, KindCancel);
            sqe->opcode = IORING_OP_ASYNC_CANCEL;
            sqe->addr = UserDataOf(KindAccept);
        }
        // The backoff timeout (if any) is short; it completes by itself.
        Release();
    }

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        if (kind == KindBackoff)
        {
            Arm();
            return;
        }
        if (kind != KindAccept)
        {
            return;
        }
        bool more = (flags & IORING_CQE_F_MORE) != 0;
        if (!more)
        {
            _acceptArmed = false;
        }
        if (result >= 0)
        {
            if (_stopped)
            {
                _ = Libc.close(result); // raced with the stop: nobody will accept it
            }
            else
            {
                HandOff(result);
            }
            if (!more)
            {
                Arm();
            }
            return;
        }
        switch (-result)
        {
            case Errno.EMFILE:
            case Errno.ENFILE:
            case Errno.ENOBUFS:
            case Errno.ENOMEM:
                // Out of fds or memory: existing connections keep being served; try again after a pause.
                FdExhaustions++;
                if (!more && !_stopped)
                {
                    io_uring_sqe* sqe = Loop.GetSqe(this, KindBackoff);
                    sqe->opcode = IORING_OP_TIMEOUT;
                    sqe->addr = (ulong)_backoff;
                    sqe->len = 1;
                }
                break;
            case Errno.ECANCELED:
                break;
            default:
                // ECONNABORTED and friends: the one connection failed, the listener goes on.
                if (!more)
                {
                    Arm();
                }
                break;
        }
    }

    /// <summary>
    /// Gives the accepted socket to the next loop in turn. The kernel hands a listening socket's connections to
    /// whichever accept it finds first, which left every connection on one loop; round robin spreads them.
    /// </summary>
    private void HandOff(int fd)
    {
        Acceptor target = _listener.NextAcceptor();
        if (target == this)
        {
            StartConnection(fd);
            return;
        }
        try
        {
            target.Loop.Post(static s => { var (acceptor, fd) = ((Acceptor, int))s!; acceptor.StartConnection(fd); }, (target, fd));
        }
        catch (ObjectDisposedException)
        {
            StartConnection(fd); // that loop has stopped: keep it here
        }
    }

    private void StartConnection(int fd)
    {
        if (Loop.IsStopping || !Loop.IsOnLoopThread)
        {
            _ = Libc.close(fd); // reached a loop on its way out: nobody will serve it
            return;
        }
        var connection = new IoUringConnection(Loop, fd, _isTcp, _settings);
        connection.Start(noDelayInherited: true); // the listener set it (IoUringListener)
        _listener.Enqueue(connection);
    }

    internal override void OnFreed()
    {
        NativeMemory.Free(_backoff);
        _backoff = null;
        _listener.OnAcceptorFreed();
    }
}
