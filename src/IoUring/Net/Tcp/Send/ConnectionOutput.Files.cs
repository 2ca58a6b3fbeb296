namespace IoUring.Net;

// A file send's place in the output (IoUringConnection.SendFileAsync): after the bytes written before the call and
// before those flushed after it, so the sender takes bytes only up to that point until the file has gone.
internal sealed partial class ConnectionOutput
{
    // Guarded by _sync.
    private FileSender? _file;        // the file send queued or running: one at a time
    private long _fileAt;             // where it goes: the output's committed bytes when it was queued

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
    /// The writer's thread: commits what was written, as a flush does (without waiting for the sender), and queues
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
            Commit();
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

    /// <summary>The file queued or running: the one to start when <see cref="TryTake"/> says
    /// <see cref="OutputTake.File"/>.</summary>
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

    /// <summary>Under the lock: the sender has sent everything before the queued file, so the file is next.</summary>
    private bool FileIsNext => _file is not null && _sent == _fileAt;

    /// <summary>Under the lock: the end of what the sender may take now (a queued file holds back what
    /// follows).</summary>
    private long SendableEnd => _file is null ? _committed : _fileAt;

    /// <summary>The file the sender started has ended (loop thread): what was flushed after it may go.</summary>
    public void EndFile()
    {
        lock (_sync)
        {
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
