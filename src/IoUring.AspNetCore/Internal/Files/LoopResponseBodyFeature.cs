using System.IO.Pipelines;
using System.Runtime.Versioning;
using IoUring.Loops;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Win32.SafeHandles;

namespace IoUring.AspNetCore.Internal.Files;

/// <summary>
/// Kestrel's response body feature with <see cref="SendFileAsync"/> reading files larger than one read
/// (<see cref="ChunkSize"/>) on the connection's loop
/// (<see cref="EventLoop.ReadAsync"/>) straight into the response's own memory (<see cref="PipeWriter.GetMemory"/> of
/// <see cref="Writer"/>), then flushing it: Kestrel still writes the headers, frames, encrypts and paces the body.
/// Everything else is the inner feature's. Immutable: one connection's requests may share it.
/// </summary>
/// <remarks>
/// Kestrel's own SendFileAsync reads through a FileStream on the thread pool (a blocking pread) into a rented array,
/// then copies that into the body. Here the read goes to the loop's ring, and its bytes land where the response is
/// sent from: over HTTP/1.1 without TLS that is the connection's output, so the file's bytes are never copied in user
/// space; over HTTP/2 and TLS Kestrel's framing and encryption copy them, and the gain is the thread not held.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed class LoopResponseBodyFeature(IHttpResponseBodyFeature inner, EventLoop loop)
    : IHttpResponseBodyFeature
{
    // Bytes asked of the writer per read: one loop round trip and one flush per chunk. The loop's output gives a block
    // of this size from its large pinned pool (EventLoop.LargeBlockPool); smaller chunks cost a round trip per 4 KiB.
    internal const int ChunkSize = 64 * 1024;

    public IHttpResponseBodyFeature Inner => inner;

    public Stream Stream => inner.Stream;

    public PipeWriter Writer => inner.Writer;

    public void DisableBuffering() => inner.DisableBuffering();

    public Task StartAsync(CancellationToken cancellationToken = default) => inner.StartAsync(cancellationToken);

    public Task CompleteAsync() => inner.CompleteAsync();

    /// <summary>As Kestrel's: the range [offset, offset + count) of the file at <paramref name="path"/> (to its end
    /// when <paramref name="count"/> is null) goes into the body.</summary>
    /// <exception cref="ArgumentOutOfRangeException">The range is not inside the file.</exception>
    /// <exception cref="IOException">The file ended early (truncated while being sent), or a read failed.</exception>
    /// <exception cref="OperationCanceledException">The token was cancelled.</exception>
    public Task SendFileAsync(string path, long offset, long? count,
        CancellationToken cancellationToken = default)
    {
        // One read's worth goes to Kestrel's copy, cheaper there (docs/benchmarks.md, "Files"). Without a count the
        // file's size decides, by a stat: the copy opens the file itself. An empty-looking file (/proc's) is read to
        // its end on the loop.
        if (count <= ChunkSize
            || (count is null && new FileInfo(path) is { Exists: true, Length: > 0 and var length }
                && length - offset <= ChunkSize))
        {
            return inner.SendFileAsync(path, offset, count, cancellationToken);
        }
        return SendOnLoopAsync(path, offset, count, cancellationToken);
    }

    private async Task SendOnLoopAsync(string path, long offset, long? count, CancellationToken cancellationToken)
    {
        using SafeFileHandle file = File.OpenHandle(path, FileMode.Open, FileAccess.Read, FileShare.ReadWrite,
            FileOptions.SequentialScan);
        long length = RandomAccess.GetLength(file);
        if (offset < 0 || offset > length)
        {
            throw new ArgumentOutOfRangeException(nameof(offset), offset, $"'{path}' is {length} bytes.");
        }
        if (count is { } asked && (asked < 0 || asked > length - offset))
        {
            throw new ArgumentOutOfRangeException(nameof(count), asked,
                $"'{path}' is {length} bytes: at most {length - offset} from offset {offset}.");
        }
        cancellationToken.ThrowIfCancellationRequested();

        // Without a count the file is sent to its end as it is then (Kestrel's copy does the same): a file that grew
        // meanwhile goes whole, and one whose size says 0 (/proc, /sys) still sends what it holds.
        PipeWriter writer = inner.Writer;
        long remaining = count ?? long.MaxValue;
        while (remaining > 0)
        {
            Memory<byte> memory = writer.GetMemory((int)Math.Min(remaining, ChunkSize));
            if (memory.Length > remaining)
            {
                memory = memory[..(int)remaining];
            }
            int read = await loop.ReadAsync(file, memory, offset, cancellationToken).ConfigureAwait(false);
            if (read == 0)
            {
                if (count is null)
                {
                    return;
                }
                throw new IOException(
                    $"'{path}' ended at byte {offset}, {remaining} bytes short of the range being sent: it was " +
                    "truncated while being sent.");
            }
            writer.Advance(read);
            offset += read;
            remaining -= read;
            FlushResult flushed = await writer.FlushAsync(cancellationToken).ConfigureAwait(false);
            if (flushed.IsCanceled)
            {
                throw new OperationCanceledException("The response's flush was cancelled.");
            }
            if (flushed.IsCompleted)
            {
                return; // the client is gone: Kestrel ends the response
            }
        }
    }
}
