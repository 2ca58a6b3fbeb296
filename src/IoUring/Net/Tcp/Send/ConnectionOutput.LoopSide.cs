using System.Diagnostics;
using System.IO.Pipelines;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// The sender's side (loop thread), caller sends, and a queued file's place.
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

    /// <summary>What the sender is to do next (loop thread).</summary>
    /// <param name="bytes">With <see cref="SendWork.Bytes"/>: valid until <see cref="Consume"/>.</param>
    /// <param name="writerError">With <see cref="SendWork.Completed"/>: the writer's error.</param>
    /// <param name="completion">A cancelled borrowed write's: run it after <paramref name="bytes"/> are
    /// submitted.</param>
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

    public bool BorrowedWriteCancelled => Volatile.Read(ref _borrowedWriteCancelled);

    /// <summary>The kernel sent <paramref name="bytes"/>; a zero-copy send's stay pinned until
    /// <see cref="Unpinned"/>.</summary>
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

    /// <summary>A zero-copy send's notification came: its <paramref name="bytes"/> hold no memory.</summary>
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

    /// <summary>The sender is gone: unsent bytes are dropped, and flushes return IsCompleted from now on, or throw
    /// <paramref name="error"/>.</summary>
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

    // ---- Caller sends ----

    /// <summary>
    /// While the loop sleeps, posting the sender costs an eventfd write and a wake-up, so a small flush sends in one
    /// non-blocking send(2) instead. Safe: the sender waits to be posted, and the fd is closed only after
    /// <see cref="CompleteSender"/>, which takes the lock.
    /// </summary>
    /// <returns>What to post to the loop; null when all went.</returns>
    private Action<object?>? SendFromCallerUnsynchronized()
    {
        Debug.Assert(Monitor.IsEntered(_sync), "a caller send without the lock");
        Debug.Assert(_file is null, "the sender never waits with a file queued: a caller send would pass it");
        if (_callerSendLimit == 0)
        {
            return s_onFlushed; // caller sends are off (TestHooks.NoCallerSends)
        }
        long length = _committed - _sent;
        // Sends large enough for zero-copy are the ring's, unless they would not go zero-copy anyway.
        long limit = _borrowedWritePending || !_sender!.MaySendZeroCopy ? MaxCallerSend : _callerSendLimit;
        // Not once aborted: the loop has yet to close, and what is flushed now is to be dropped.
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
                // A borrowed write's MemoryManager threw: the flush must not throw with the sender's wait taken, so
                // the ring's sender takes the bytes (and fails the connection if it cannot).
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

    /// <summary>More flushes likely soon: one post serves them all, where a send from each costs a system
    /// call.</summary>
    private bool MoreSendsLikely() => _input!.MayHaveUnconsumed || ThreadPool.PendingWorkItemCount != 0;

    // ---- A queued file (SendFileAsync): the sender takes bytes only up to it until it has gone ----

    /// <summary>The writer's thread: commits what was written, as a flush without waiting, and queues
    /// <paramref name="file"/> after it.</summary>
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

    /// <summary>The file queued or running.</summary>
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

    private bool FileIsNextUnsynchronized => _file is not null && _sent == _fileAt;

    /// <summary>A queued file holds back what follows it.</summary>
    private long SendLimitUnsynchronized => _file is null ? _committed : _fileAt;

    /// <summary>Loop thread, or wherever a stopped loop's retry ends the file.</summary>
    public void EndFile()
    {
        lock (_sync)
        {
            Debug.Assert(_file is not null, "ended a file that was not running");
            _file = null;
        }
    }

    /// <summary>Before the sender started it (loop thread): false when it is not queued.</summary>
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
