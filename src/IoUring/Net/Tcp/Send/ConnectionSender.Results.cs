using IoUring.Interop;

namespace IoUring.Net;

// A send's result (loop thread): the bytes counted and consumed, the errors sorted (send again, copy instead, back to
// plain sends, or fail), and the end of the send loop: FIN after the data, or the connection's failure.
internal sealed partial class ConnectionSender
{
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
    /// fault: its writes see the output completed, FlushResult.IsCompleted, as with Kestrel's Sockets transport,
    /// instead of an exception Kestrel logs as an application error; the input still reports the reset, and the
    /// connection still closes abortively). Then FIN after the data, or the connection fails on
    /// <paramref name="error"/>.
    /// </summary>
    private void Finish(Exception? error, bool peerReset)
    {
        if (_finished)
        {
            return;
        }
        _finished = true;
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
        // (under connection churn a worker wake-up per connection, a large share of the CPU), and shutting down the
        // sending side of a socket only queues the FIN, it never blocks. A failure (the peer reset first) changes
        // nothing here: the connection closes either way.
        _ = Libc.shutdown(_fd, Libc.SHUT_WR);
        _ended = true;
        _connection.OnDirectionEnded();
    }
}
