namespace IoUring.Net;

// File sends (IoUringConnection.SendFileAsync): once the bytes flushed before a file are sent, the sender hands the
// socket to its FileSender until the file has gone (a send in flight meanwhile, as far as the rest of the sender
// knows), then goes on with what was flushed after it.
internal sealed partial class ConnectionSender
{
    private FileSender? _fileSending; // the file being sent: nothing else is, until it ends

    private void StartFile(FileSender file)
    {
        _sending = true;
        _fileSending = file;
        file.Start();
    }

    /// <summary>A CQE of the running file send's request (the Send kind with its tag).</summary>
    public void OnFileCompletion(uint tag, int result)
    {
        _owner.Loop.AssertOnLoopThread(); // completions are dispatched on the loop only
        _fileSending!.OnCompletion(tag, result);
    }

    /// <summary>The file send moved <paramref name="count"/> bytes to the socket.</summary>
    public void OnFileBytesSent(int count)
    {
        _bytesSent += count;
        _owner.Loop.OnBytesSent(count);
    }

    /// <summary>
    /// The running file send ended, nothing of it in flight: the output goes on after it; a socket error
    /// (<paramref name="socketErrno"/>, not 0) ends the sender as its own send's would (a reset, the connection's
    /// failure).
    /// </summary>
    public void OnFileEnded(int socketErrno)
    {
        _fileSending = null;
        _output.EndFile();
        _sending = false;
        if (socketErrno != 0)
        {
            _lastSendZeroCopy = false;
            OnSendResult(-socketErrno);
        }
        else
        {
            SendNext();
        }
    }

    /// <summary>Closing: cancels the file send's request in flight, if any. False when the loop had no SQE.</summary>
    private bool CancelFileForClose() => _fileSending?.CancelForClose() ?? true;

    /// <summary>The sender ended with a file still queued: it fails, none of it sent.</summary>
    private void AbandonQueuedFile(Exception? error)
    {
        if (_output.QueuedFile is { } file && _output.RemoveQueuedFile(file))
        {
            file.Abandon(error);
        }
    }
}
