using System.Runtime.InteropServices;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// Closing: cancel every request on the fd, wait for each final CQE, then close through the ring, so the fd
// number cannot be reused while a request on it may still run. Then tell the application. Zero-copy notifications
// are not waited for: they may come minutes later (unacknowledged data keeps the kernel's hold on the memory until the
// peer acknowledges it or goes away), so only the memory waits: the pins and the handle are freed after the last one.
public sealed partial class IoUringConnection
{
    private bool _closing;
    private bool _closeSubmitted;
    private bool _fdClosed;

    private void CheckBothDirectionsEnded()
    {
        if (_receiveEnded && _sendEnded)
        {
            BeginClose(null, abortive: false);
        }
    }

    private unsafe void BeginClose(Exception? reason, bool abortive)
    {
        if (_closing)
        {
            return;
        }
        _closing = true;
        _abortiveClose = abortive;
        if (abortive && (_abortRequested != 0 ? _abortWithReset : _settings.AbortWithReset))
        {
            // SO_LINGER {on, 0}: close sends RST and drops unsent data, as Kestrel's Sockets transport does on abort.
            Libc.linger linger = new() { l_onoff = 1, l_linger = 0 };
            _ = Libc.setsockopt(_fd, Libc.SOL_SOCKET, Libc.SO_LINGER, &linger, (uint)sizeof(Libc.linger));
        }
        _receiveEnded = true;
        _input.Writer.Complete(reason);
        _output.Reader.CancelPendingRead();
        if (_owner.InFlight > _notificationsPending)
        {
            io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindCancel);
            sqe->opcode = IORING_OP_ASYNC_CANCEL;
            sqe->fd = _fd;
            sqe->cancel_flags = IORING_ASYNC_CANCEL_FD | IORING_ASYNC_CANCEL_ALL;
        }
        else
        {
            SubmitClose();
        }
    }

    /// <summary>After each completion: close once only notifications remain in flight; release once the fd is closed.</summary>
    private void CheckCloseProgress()
    {
        if (_closing && !_closeSubmitted && _owner.InFlight == _notificationsPending)
        {
            SubmitClose();
        }
        else if (_fdClosed && !_owner.IsReleased)
        {
            OnClosed();
            _owner.Release(); // frees the handle now, or after the last notification (OnFreed)
        }
    }

    private unsafe void SubmitClose()
    {
        _closeSubmitted = true;
        ReleaseSocket();
        io_uring_sqe* sqe = _owner.Loop.GetSqe(_owner, KindClose);
        sqe->opcode = IORING_OP_CLOSE;
        sqe->fd = _fd;
    }

    private void OnCloseCompleted() => _fdClosed = true;

    /// <summary>The fd is closed and no request but zero-copy notifications is in flight: the connection is closed.</summary>
    private void OnClosed()
    {
        _settings.Registry?.Remove(this);
        _input.Writer.Complete();
        _closed.TrySetResult();
        ThreadPool.UnsafeQueueUserWorkItem(static cts => cts.Cancel(), _closedTokenSource, preferLocal: false);
    }

    private unsafe void OnFreed()
    {
        // Nothing is in flight: the kernel no longer reads the send message or pinned memory.
        if (_sendMessage != null)
        {
            NativeMemory.Free(_sendMessage);
            _sendMessage = null;
        }
    }
}
