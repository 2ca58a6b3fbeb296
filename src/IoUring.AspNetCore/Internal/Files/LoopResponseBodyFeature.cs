using System.Diagnostics;
using System.IO.Pipelines;
using System.Runtime.Versioning;
using IoUring.Loops;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Win32.SafeHandles;

namespace IoUring.AspNetCore.Internal.Files;

// SendFileAsync reads on the loop straight into the writer's memory: over plain HTTP/1.1, the connection's output.
// Immutable: shared by requests.
[SupportedOSPlatform("linux")]
internal sealed class LoopResponseBodyFeature(IHttpResponseBodyFeature inner, EventLoop loop)
    : IHttpResponseBodyFeature
{
    // One read and one flush per chunk; the loop's output gives this size from EventLoop.LargeBlockPool.
    internal const int ChunkSize = 64 * 1024;

    public IHttpResponseBodyFeature Inner => inner;

    public Stream Stream => inner.Stream;

    public PipeWriter Writer => inner.Writer;

    public void DisableBuffering() => inner.DisableBuffering();

    public Task StartAsync(CancellationToken cancellationToken = default) => inner.StartAsync(cancellationToken);

    public Task CompleteAsync() => inner.CompleteAsync();

    /// <exception cref="ArgumentOutOfRangeException">The range is not inside the file.</exception>
    /// <exception cref="IOException">The file ended early (truncated while being sent), or a read failed.</exception>
    /// <exception cref="OperationCanceledException">The token was cancelled.</exception>
    public Task SendFileAsync(string path, long offset, long? count,
        CancellationToken cancellationToken = default)
    {
        // One chunk or less is cheaper through Kestrel's copy. An empty-looking file (/proc's) is read on the loop.
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

        // Without a count, to the end as it is then (as Kestrel's copy): a file that grew goes whole, /proc's too.
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
            Debug.Assert(read <= memory.Length && read <= remaining, "a read fills at most the memory given");
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
