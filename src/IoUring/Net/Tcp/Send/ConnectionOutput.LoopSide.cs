using System.Diagnostics;
using System.IO.Pipelines;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// The sender's side: on the loop thread ConnectionSender takes the flushed bytes (TakeWork), says what the kernel sent
// (Consume, Unpinned) and ends the output (CompleteSender); a flush may send itself (caller sends); a file's place.
internal sealed partial class ConnectionOutput
{
    /// <summary>What <see cref="QueueFile"/> did.</summary>
    public enum FileQueueing
    {
        Queued,
        WriterCompleted,
        FlushPending,
        FileInFlight,
        SenderGone,
    }

    /// <summary>
    /// What the sender is to do (loop thread): <see cref="SendWork.Bytes"/> (<paramref name="bytes"/>, which stay in
    /// place until <see cref="Consume"/>), <see cref="SendWork.Completed"/> (the writer completed and everything is
    /// sent, or it completed with <paramref name="writerError"/>), <see cref="SendWork.File"/>, or
    /// <see cref="SendWork.None"/> (the next flush posts <see cref="ConnectionSender.OnOutputFlushed"/>).
    /// </summary>
    /// <param name="bytes">What to send, with <see cref="SendWork.Bytes"/>.</param>
    /// <param name="writerError">The writer's error, with <see cref="SendWork.Completed"/>.</param>
    /// <param name="completion">A cancelled borrowed write's completion (its unsent rest copied here): the sender runs
    /// it once it has submitted <paramref name="bytes"/> (an inline continuation may close the connection).</param>
    public SendWork TakeWork(out UnsentBytes bytes, out Exception? writerError, out AwaiterCompletion completion)
    {
        Debug.Assert(_loop.IsOnLoopThread, "the sender takes bytes on the loop thread only");
        completion = default;
        SendWork work;
        lock (_sync)
        {
            if (_borrowedWriteCancelled)
            {
                completion = CopyBorrowedRestUnsynchronized(); // no send is in flight: none reads the caller's memory
            }
            writerError = _writerError;
            if (FileIsNextUnsynchronized && writerError is null)
            {
                bytes = default;
                work = SendWork.File;
            }
            else if (_writerCompleted && (writerError is not null || _committed == _sent))
            {
                bytes = default;
                work = SendWork.Completed;
            }
            else if (_committed > _sent)
            {
                Debug.Assert(SendLimitUnsynchronized > _sent, "bytes taken past a queued file");
                bytes = new UnsentBytes(_head!, _headIndex, SendLimitUnsynchronized - _sent, _borrowedWritePending);
                work = SendWork.Bytes;
            }
            else
            {
                _senderWaiting = true;
                bytes = default;
                work = SendWork.None;
            }
        }
        return work;
    }

    /// <summary>A borrowed write was cancelled (the sender asks before it takes bytes).</summary>
    public bool BorrowedWriteCancelled => Volatile.Read(ref _borrowedWriteCancelled);

    /// <summary>
    /// The kernel sent <paramref name="bytes"/> (of those <see cref="TakeWork"/> gave): their blocks go back (once
    /// unpinned); a waiting flush may go on. <paramref name="pinnedUntilNotification"/>: a zero-copy send's, held until
    /// <see cref="Unpinned"/>.
    /// </summary>
    public void Consume(int bytes, bool pinnedUntilNotification = false)
    {
        Debug.Assert(_loop.IsOnLoopThread, "sends complete on the loop thread only");
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            Debug.Assert(bytes >= 0 && bytes <= _committed - _sent, "consumed more than was flushed and unsent");
            _sent += bytes;
            if (pinnedUntilNotification)
            {
                _pinnedBySender += bytes;
            }
            ReleaseSentUnsynchronized();
            completion = ResumeIfCaughtUpUnsynchronized();
        }
        completion.Run();
    }

    /// <summary>A zero-copy send's notification came: the <paramref name="bytes"/> it had sent no longer hold
    /// memory.</summary>
    public void Unpinned(int bytes)
    {
        AwaiterCompletion completion;
        lock (_sync)
        {
            _pinnedBySender -= bytes;
            Debug.Assert(_pinnedBySender >= 0, "unpinned more than zero-copy sends pinned");
            completion = ResumeIfCaughtUpUnsynchronized();
        }
        completion.Run();
    }

    /// <summary>Completes a waiting flush once a borrowed write is all sent, or the buffered bytes fell below the
    /// resume threshold.</summary>
    private AwaiterCompletion ResumeIfCaughtUpUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a flush resumed without the lock");
        if (_flush.IsWaiting && !_senderCompleted
            && (_borrowedWritePending ? _sent >= _borrowedWriteEnd : BufferedBytesUnsynchronized < _resumeThreshold))
        {
            EndBorrowedWriteUnsynchronized(); // its segments went back with the release: all of it is sent
            return _flush.Complete(new FlushResult(isCanceled: false, isCompleted: false), null, _inlineContinuations);
        }
        return default;
    }

    /// <summary>
    /// The sender is gone (closing, the peer gone, a send error): unsent bytes are dropped and flushes return
    /// IsCompleted from now on, or throw <paramref name="error"/>.
    /// </summary>
    public void CompleteSender(Exception? error)
    {
        AwaiterCompletion completion = default;
        lock (_sync)
        {
            if (_senderCompleted)
            {
                return;
            }
            _senderCompleted = true;
            _senderError = error;
            _senderWaiting = false;
            _sent = _committed;
            ReleaseSentUnsynchronized(); // borrowed segments too: no send is in flight once the sender is gone
            EndBorrowedWriteUnsynchronized();
            if (_flush.IsWaiting)
            {
                completion = _flush.Complete(new FlushResult(isCanceled: false, isCompleted: error is null), error,
                    _inlineContinuations);
            }
        }
        completion.Run();
    }

    // ---- Caller sends: a flush that finds the sender waiting while the loop sleeps sends the bytes itself ----

    /// <summary>
    /// In a flush that took the sender's wait for bytes: while the loop sleeps, posting the sender costs an eventfd
    /// write, a wake-up and a loop iteration before the bytes go, so a flush of at most the caller-send limit sends
    /// them in one non-blocking send(2) instead, as a socket's send does. Safe: the sender cannot send meanwhile (it
    /// waits to be posted), and the fd is closed only after <see cref="CompleteSender"/>, which takes the lock.
    /// </summary>
    /// <returns>What to post to the loop: null when every flushed byte went (the sender waits again);
    /// <see cref="ConnectionSender.OnOutputFlushed"/> for what is left (not tried, partial, EAGAIN);
    /// <see cref="ConnectionSender.OnCallerSendFailed"/> for an error, which the sender handles as its own.</returns>
    private Action<object?>? SendFromCallerUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a caller send without the lock");
        Debug.Assert(_file is null, "the sender never waits with a file queued: a caller send would pass it");
        if (_callerSendLimit == 0)
        {
            return s_onFlushed; // caller sends are off (TestHooks.NoCallerSends)
        }
        long length = _committed - _sent;
        // The limit keeps what is large enough to go zero-copy for the ring: no reason for a borrowed write (never
        // zero-copy) or where the sender does not send zero-copy (the kernel copied, as over loopback, or never could).
        long limit = _borrowedWritePending || !_sender!.MaySendZeroCopy ? MaxCallerSend : _callerSendLimit;
        // Not once the application aborted: the loop has yet to close, and what is flushed now is to be dropped.
        if (length > limit || !_loop.IsSleeping || _loop.IsOnLoopThread || _sender!.AbortRequested || MoreSendsLikely())
        {
            return s_onFlushed;
        }
        var bytes = new UnsentBytes(_head!, _headIndex, length, _borrowedWritePending); // read only during this call
        byte opcode = bytes.IsSingleSegment ? IORING_OP_SEND : IORING_OP_SENDMSG;
        int fault = _loop.Faults?.TakeCallerSendFault(opcode) ?? 0;
        long sent;
        int errno = 0;
        if (fault != 0)
        {
            sent = -1;
            errno = fault;
        }
        else
        {
            try
            {
                sent = NonBlockingSend.Send(_fd, bytes, out errno);
            }
            catch (Exception)
            {
                // A borrowed write's MemoryManager (GetSpan or Pin) threw: the flush must not throw with the sender
                // no longer waiting, so the ring's sender takes the bytes, and fails the connection if it cannot.
                return s_onFlushed;
            }
        }
        if (sent < 0)
        {
            if (errno is Errno.EAGAIN or Errno.EINTR)
            {
                _callerSendsCutShort++;
                return s_onFlushed; // the socket's buffer is full: the ring's send waits for room
            }
            _sender!.CallerSendError = errno;
            return s_onCallerSendFailed;
        }
        _sent += sent;
        _bytesSentByCallers += sent;
        _loop.OnCallerSend((int)sent);
        ReleaseSentUnsynchronized();
        if (_sent < _committed)
        {
            _callerSendsCutShort++;
            return s_onFlushed;
        }
        _senderWaiting = true; // as before the flush: nothing to send, the next commit posts or sends again
        return null;
    }

    /// <summary>
    /// Whether more flushes are likely before the loop would take this one: then one post serves them all and the loop
    /// submits their sends together, where each flush sending itself costs a system call apiece (sending from every
    /// flush lost to posting under Kestrel with pipelined requests: docs/benchmarks). Likely when the thread pool has
    /// work queued (other connections' flushes come next) or this connection's reader has unconsumed bytes.
    /// </summary>
    private bool MoreSendsLikely() => _input!.MayHaveUnconsumed || ThreadPool.PendingWorkItemCount != 0;

    // ---- A file send's place (IoUringConnection.SendFileAsync): after the bytes written before the call and before
    // those flushed after it, so the sender takes bytes only up to it until the file has gone ----

    /// <summary>
    /// The writer's thread: commits what was written, as a flush does (without waiting), and queues
    /// <paramref name="file"/> right after it, unless the writer may not write now (completed, its flush still waiting,
    /// another file queued) or the sender is gone (<paramref name="senderError"/>: what ended it, if an error did).
    /// </summary>
    public FileQueueing QueueFile(FileSender file, out Exception? senderError)
    {
        bool postSender;
        lock (_sync)
        {
            senderError = _senderError;
            if (_writerCompleted)
            {
                return FileQueueing.WriterCompleted;
            }
            if (_flush.IsWaiting)
            {
                return FileQueueing.FlushPending;
            }
            if (_file is not null)
            {
                return FileQueueing.FileInFlight;
            }
            if (_senderCompleted)
            {
                return FileQueueing.SenderGone;
            }
            CommitUnsynchronized();
            _file = file;
            _fileAt = _committed;
            postSender = _senderWaiting; // an idle sender must come and start it
            _senderWaiting = false;
        }
        if (postSender)
        {
            _loop.Schedule(s_onFlushed, _sender); // outside the lock: it may write the loop's eventfd
        }
        return FileQueueing.Queued;
    }

    /// <summary>The file queued or running: the one to start when <see cref="TakeWork"/> says
    /// <see cref="SendWork.File"/>.</summary>
    public FileSender? QueuedFile
    {
        get
        {
            lock (_sync)
            {
                return _file;
            }
        }
    }

    /// <summary>The sender has sent everything before the queued file.</summary>
    private bool FileIsNextUnsynchronized => _file is not null && _sent == _fileAt;

    /// <summary>The end of what the sender may take now (a queued file holds back what follows).</summary>
    private long SendLimitUnsynchronized => _file is null ? _committed : _fileAt;

    /// <summary>The file the sender started has ended (loop thread, or wherever a stopped loop's retry ends it): what
    /// was flushed after it may go.</summary>
    public void EndFile()
    {
        lock (_sync)
        {
            Debug.Assert(_file is not null, "ended a file that was not running");
            _file = null;
        }
    }

    /// <summary>
    /// Takes <paramref name="file"/> out of the output before the sender started it (loop thread: a cancel); false when
    /// it is not queued (the sender started it, or gave it up when it ended).
    /// </summary>
    public bool RemoveQueuedFile(FileSender file)
    {
        lock (_sync)
        {
            if (_file != file)
            {
                return false;
            }
            _file = null;
            return true;
        }
    }
}
