using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>One outbound IORING_OP_CONNECT; on success the socket becomes a connection on the same loop.</summary>
[SupportedOSPlatform("linux")]
internal sealed unsafe class ConnectOperation : RingOwner
{
    private const uint KindConnect = 1;
    private const uint KindCancel = 2;

    private readonly ConnectionSettings _settings;
    private readonly EndPoint _endPoint;
    private readonly TaskCompletionSource<IoUringConnection> _result =
        new(TaskCreationOptions.RunContinuationsAsynchronously);
    private byte* _address;     // the sockaddr the kernel reads; freed when the connect's final CQE arrived
    private int _addressLength;
    private int _fd = -1;
    private CancellationToken _token;
    private CancellationTokenRegistration _cancellation;

    public ConnectOperation(EventLoop loop, EndPoint endPoint, ConnectionSettings settings) : base(loop)
    {
        _endPoint = endPoint;
        _settings = settings;
    }

    public Task<IoUringConnection> Task => _result.Task;

    /// <summary>Creates the socket and queues the connect. Loop thread.</summary>
    public void Start(CancellationToken cancellationToken)
    {
        if (Loop.IsStopping || !Loop.IsOnLoopThread)
        {
            // Posted behind the loop's stop (or run after it ended): the stop's cancel-all will not see a request
            // submitted now, and nobody would close the connection it made.
            Fail(LoopStopped());
            Release();
            return;
        }
        try
        {
            int family = _endPoint.AddressFamily switch
            {
                AddressFamily.InterNetwork => Libc.AF_INET,
                AddressFamily.InterNetworkV6 => Libc.AF_INET6,
                AddressFamily.Unix => Libc.AF_UNIX,
                _ => throw new NotSupportedException($"Endpoint family {_endPoint.AddressFamily} is not supported."),
            };
            SocketAddress address = _endPoint.Serialize(); // the OS's sockaddr layout on Linux
            _fd = Libc.socket(family, Libc.SOCK_STREAM | Libc.SOCK_CLOEXEC, 0);
            if (_fd < 0)
            {
                throw SocketErrors.FromErrno(Libc.GetLastErrno());
            }
            _addressLength = address.Size;
            _address = (byte*)NativeMemory.Alloc((nuint)address.Size);
            address.Buffer.Span[..address.Size].CopyTo(new Span<byte>(_address, address.Size));
            _token = cancellationToken;
        }
        catch (Exception ex)
        {
            Fail(ex);
            Release();
            return;
        }
        SubmitConnect();
    }

    private void SubmitConnect()
    {
        Loop.AssertOnLoopThread();
        if (Loop.IsStopping || _token.IsCancellationRequested)
        {
            Abandon();
            return;
        }
        io_uring_sqe* sqe = Loop.TryNewSqe(this, KindConnect);
        if (sqe == null)
        {
            Loop.RetryNextIteration(this, static op => op.SubmitConnect(), static op => op.Abandon());
            return;
        }
        Debug.Assert(_fd >= 0 && _address != null && InFlight == 1, "CONNECT without its socket or address");
        sqe->opcode = IORING_OP_CONNECT;
        sqe->fd = _fd;
        // SAFETY: _address is freed at this CONNECT's completion (or by Abandon, when it never reached the kernel).
        sqe->addr = (ulong)_address;
        sqe->off = (ulong)_addressLength;
        if (_token.CanBeCanceled)
        {
            _cancellation = _token.UnsafeRegister(static s => ((ConnectOperation)s!).RequestCancel(), this);
        }
    }

    /// <summary>A connect that never reached the kernel ends.</summary>
    private void Abandon()
    {
        NativeMemory.Free(_address);
        _address = null;
        Fail(_token.IsCancellationRequested && !Loop.IsStopping
            ? new OperationCanceledException("The connect was cancelled.", _token)
            : LoopStopped());
        Release();
    }

    private void RequestCancel()
    {
        try
        {
            Loop.Post(static s => ((ConnectOperation)s!).SubmitCancel(), this);
        }
        catch (ObjectDisposedException)
        {
            // The loop stopped and cancelled the connect itself.
        }
    }

    /// <summary>Cancels the CONNECT if it is still in flight; with no SQE, again next iteration (or it would wait out
    /// the kernel's SYN retries).</summary>
    private void SubmitCancel()
    {
        Loop.AssertOnLoopThread();
        if (InFlight == 0 || Loop.IsStopping)
        {
            return;
        }
        io_uring_sqe* sqe = Loop.TryNewSqe(this, KindCancel);
        if (sqe == null)
        {
            Loop.RetryNextIteration(this, static op => op.SubmitCancel());
            return;
        }
        sqe->opcode = IORING_OP_ASYNC_CANCEL;
        sqe->addr = UserDataOf(KindConnect);
    }

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        if (kind != KindConnect)
        {
            return;
        }
        Debug.Assert(_address != null, "a second CONNECT completion");
        NativeMemory.Free(_address);
        _address = null;
        _cancellation.Dispose();
        if (result == 0 && Loop.IsStopping)
        {
            // Connected after the stop's cancel-all: the loop's connections are already closed, so close this one too.
            Fail(LoopStopped());
        }
        else if (result == 0)
        {
            var connection = new IoUringConnection(Loop, _fd,
                _endPoint.AddressFamily != System.Net.Sockets.AddressFamily.Unix, _settings);
            _fd = -1;
            connection.Start();
            _result.TrySetResult(connection);
        }
        else if (result == -Errno.ECANCELED)
        {
            // by the caller's token, or the stop's cancel-all (reported as for a connect started after it)
            Fail(Loop.IsStopping ? LoopStopped() : new OperationCanceledException("The connect was cancelled."));
        }
        else
        {
            Fail(SocketErrors.FromErrno(-result));
        }
        Release();
    }

    private static ObjectDisposedException LoopStopped()
        => new(nameof(EventLoop), "The event loop is stopping: the connect was abandoned.");

    private void Fail(Exception error)
    {
        if (_fd >= 0)
        {
            _ = Libc.close(_fd); // no request on it is in flight any more
            _fd = -1;
        }
        _result.TrySetException(error);
    }
}
