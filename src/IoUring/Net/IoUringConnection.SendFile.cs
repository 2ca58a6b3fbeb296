using Microsoft.Win32.SafeHandles;

namespace IoUring.Net;

public sealed partial class IoUringConnection
{
    /// <summary>
    /// Sends <paramref name="count"/> bytes of <paramref name="file"/> from <paramref name="offset"/>, after what was
    /// written to <see cref="Output"/> before the call, without a user-space copy where the kernel can (SPLICE).
    /// Completes when the socket has taken the last byte.
    /// </summary>
    /// <remarks>
    /// <para>Flushes made while it runs go after the file. Dispose the file only once the task completes.</para>
    /// <para>A range past the end fails with <see cref="EndOfStreamException"/> before sending, a file that shrinks
    /// meanwhile partway. In these cases, and after a cancel or a read error (<see cref="IOException"/>), the
    /// connection stays open though the peer got part of the range: <see cref="Abort(Exception?)"/> it unless the
    /// protocol can tell. A socket error fails the connection; a connection closed first fails the call with an
    /// <see cref="IOException"/>.</para>
    /// <para>Each call uses a pipe (two fds) and, while a splice waits for the peer, an io_uring worker thread.</para>
    /// </remarks>
    /// <exception cref="InvalidOperationException">Another file send or a flush has not completed, or
    /// <see cref="Output"/> was completed.</exception>
    /// <exception cref="NotSupportedException">The file cannot seek (a pipe, a socket).</exception>
    public Task SendFileAsync(SafeFileHandle file, long offset, long count, CancellationToken cancellationToken)
    {
        ArgumentNullException.ThrowIfNull(file);
        ArgumentOutOfRangeException.ThrowIfNegative(offset);
        ArgumentOutOfRangeException.ThrowIfNegative(count);
        if (cancellationToken.IsCancellationRequested)
        {
            return Task.FromCanceled(cancellationToken);
        }
        long length = RandomAccess.GetLength(file);
        if (offset > length || count > length - offset)
        {
            return Task.FromException(new EndOfStreamException(
                $"The file is {length} bytes long: the range of {count} bytes from offset {offset} ends past it."));
        }
        var sender = new FileSender(this, _owner, _output, _fd, file, offset, count, cancellationToken);
        sender.RegisterCancellation();
        ConnectionOutput.FileQueueing queueing = _output.QueueFile(sender, out Exception? senderError);
        if (queueing == ConnectionOutput.FileQueueing.Queued)
        {
            return sender.Task;
        }
        sender.Discard();
        return queueing switch
        {
            ConnectionOutput.FileQueueing.WriterCompleted =>
                throw new InvalidOperationException("Output was completed: nothing more can be sent."),
            ConnectionOutput.FileQueueing.FlushPending =>
                throw new InvalidOperationException("A flush of Output has not completed: await it first."),
            ConnectionOutput.FileQueueing.FileInFlight =>
                throw new InvalidOperationException("Another SendFileAsync has not completed: await it first."),
            _ => Task.FromException(senderError
                ?? _settings.CreateAbortedException("The connection is closing: nothing more can be sent.")),
        };
    }

    /// <summary>As <see cref="SendFileAsync(SafeFileHandle, long, long, CancellationToken)"/> with the file at
    /// <paramref name="path"/>, opened for reading and closed when the call ends; a null <paramref name="count"/>
    /// sends the rest of the file.</summary>
    public async Task SendFileAsync(string path, long offset, long? count, CancellationToken cancellationToken)
    {
        ArgumentException.ThrowIfNullOrEmpty(path);
        using SafeFileHandle file = File.OpenHandle(path, FileMode.Open, FileAccess.Read, FileShare.Read);
        long length = count ?? Math.Max(0, RandomAccess.GetLength(file) - offset);
        await SendFileAsync(file, offset, length, cancellationToken).ConfigureAwait(false);
    }
}
