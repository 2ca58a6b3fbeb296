using System.Buffers;
using System.IO.Pipelines;

namespace IoUring.Net;

// CopyToAsync to a connection's Output: the received blocks are lent, not copied.
internal sealed partial class ConnectionInput
{
    /// <summary>
    /// To a connection's Output
    /// (<see cref="ConnectionOutput.WriteAsync(in ReadOnlySequence{byte}, CancellationToken)"/>) a Complete keeps the
    /// lent blocks until it is done, so the ring never receives into memory a send may still read.
    /// </summary>
    public override Task CopyToAsync(PipeWriter destination, CancellationToken cancellationToken = default)
    {
        ArgumentNullException.ThrowIfNull(destination);
        return destination is ConnectionOutput output
            ? CopyToOutputAsync(output, cancellationToken)
            : base.CopyToAsync(destination, cancellationToken);
    }

    private async Task CopyToOutputAsync(ConnectionOutput output, CancellationToken cancellationToken)
    {
        // Lent for the whole copy, not per write: a Complete (a proxy disposing this connection) between a read's
        // result and its write would otherwise release the blocks under the result.
        BeginLending();
        try
        {
            while (true)
            {
                ReadResult result;
                try
                {
                    result = await ReadAsync(cancellationToken).ConfigureAwait(false);
                }
                catch (InvalidOperationException) when (IsReaderCompleted)
                {
                    return; // completed before the read began
                }
                if (IsReaderCompleted)
                {
                    return; // completed while the read waited: its blocks go back below
                }
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (result.IsCanceled)
                {
                    // A Complete on another thread may land after the check above: then there is nothing to
                    // advance and the copy ends as if it had come first.
                    _loop.Options.Hooks?.AfterCancelledCopyRead?.Invoke();
                    if (!TryAdvance(buffer.Start))
                    {
                        return;
                    }
                    throw new OperationCanceledException("The read was canceled (CancelPendingRead).");
                }
                FlushResult flush = default;
                if (!buffer.IsEmpty)
                {
                    try
                    {
                        // A read returns from the consumed offset: these bytes are being answered, not waiting.
                        Volatile.Write(ref _copyingEnd, Volatile.Read(ref _consumed) + buffer.Length);
                        flush = await output.WriteAsync(buffer, cancellationToken).ConfigureAwait(false);
                    }
                    catch
                    {
                        // Output holds none of the memory any more (a cancelled write's unsent bytes were copied, a
                        // failed one's dropped): consumed.
                        TryAdvance(buffer.End);
                        throw;
                    }
                }
                if (!TryAdvance(buffer.End))
                {
                    return;
                }
                if (flush.IsCanceled)
                {
                    throw new OperationCanceledException("The flush was canceled (CancelPendingFlush).");
                }
                if (flush.IsCompleted || result.IsCompleted)
                {
                    return;
                }
            }
        }
        finally
        {
            EndLending();
        }
    }

    private bool IsReaderCompleted => Volatile.Read(ref _readerCompleted);

    /// <summary>False when the reader was completed meanwhile: the copy ends.</summary>
    private bool TryAdvance(SequencePosition consumed)
    {
        try
        {
            AdvanceTo(consumed);
            return true;
        }
        catch (InvalidOperationException) when (IsReaderCompleted)
        {
            return false;
        }
    }

    private void BeginLending()
    {
        lock (_sync)
        {
            _lent = true;
        }
    }

    private void EndLending()
    {
        lock (_sync)
        {
            _lent = false;
            if (_readerCompleted)
            {
                _consumed = _written;
                ReleaseConsumed();
            }
        }
    }
}
