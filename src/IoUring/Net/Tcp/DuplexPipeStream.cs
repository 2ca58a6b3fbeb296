using System.IO.Pipelines;
using System.Runtime.Versioning;

namespace IoUring.Net;

/// <summary>
/// A <see cref="Stream"/> over a connection's two pipes. Disposing it completes both, and closes an
/// <paramref name="owner"/> without waiting: gracefully, or abortively after <see cref="OwnedCloseGrace"/>.
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class DuplexPipeStream(PipeReader input, PipeWriter output, IoUringConnection? owner = null) : Stream
{
    /// <summary>A peer that never reads would hold the fd of a graceful close forever.</summary>
    internal static readonly TimeSpan OwnedCloseGrace = TimeSpan.FromSeconds(5);

    private readonly Stream _reader = input.AsStream(leaveOpen: true);
    private readonly Stream _writer = output.AsStream(leaveOpen: true);

    public override bool CanRead => true;
    public override bool CanWrite => true;
    public override bool CanSeek => false;
    public override long Length => throw new NotSupportedException();
    public override long Position
    {
        get => throw new NotSupportedException();
        set => throw new NotSupportedException();
    }

    public override int Read(byte[] buffer, int offset, int count) => _reader.Read(buffer, offset, count);

    public override ValueTask<int> ReadAsync(Memory<byte> buffer, CancellationToken cancellationToken = default)
        => _reader.ReadAsync(buffer, cancellationToken);

    public override Task<int> ReadAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken)
        => _reader.ReadAsync(buffer, offset, count, cancellationToken);

    public override void Write(byte[] buffer, int offset, int count) => _writer.Write(buffer, offset, count);

    public override ValueTask WriteAsync(ReadOnlyMemory<byte> buffer, CancellationToken cancellationToken = default)
        => _writer.WriteAsync(buffer, cancellationToken);

    public override Task WriteAsync(byte[] buffer, int offset, int count, CancellationToken cancellationToken)
        => _writer.WriteAsync(buffer, offset, count, cancellationToken);

    public override void Flush() => _writer.Flush();

    public override Task FlushAsync(CancellationToken cancellationToken) => _writer.FlushAsync(cancellationToken);

    public override long Seek(long offset, SeekOrigin origin) => throw new NotSupportedException();

    public override void SetLength(long value) => throw new NotSupportedException();

    protected override void Dispose(bool disposing)
    {
        if (disposing)
        {
            // Completing Output sends FIN; completing Input stops receiving.
            input.Complete();
            output.Complete();
            if (owner is not null)
            {
                // Not awaited, as closing a socket does not wait for the peer.
                _ = CloseAsync(owner);
            }
        }
        base.Dispose(disposing);
    }

    // Graceful (what is left of the output, then FIN); past the grace the peer is cut off (RST) so the fd is released.
    private static async Task CloseAsync(IoUringConnection connection)
    {
        Task closed = connection.DisposeAsync().AsTask();
        try
        {
            await closed.WaitAsync(OwnedCloseGrace).ConfigureAwait(false);
        }
        catch (TimeoutException)
        {
            connection.Abort(null, reset: true);
            await closed.ConfigureAwait(false);
        }
    }
}
