using System.Buffers;
using System.Collections.Concurrent;
using System.IO.Pipelines;
using System.Net.Sockets;
using System.Runtime.InteropServices;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// A <see cref="Socket"/> behind two <see cref="Pipe"/>s, served the way Kestrel's Sockets transport serves a connection:
/// a receive loop that fills <see cref="Input"/> (after a zero-byte receive, so an idle connection holds no buffer) and a
/// send loop that drains <see cref="Output"/> with one gathering send per read. The same pipe API as an
/// <see cref="IoUring.Net.IoUringConnection"/> on System.Net.Sockets, with the same thresholds as the plain API's
/// defaults (pause reading at 1 MiB, writing at 64 KiB), so the echo can tell what the API costs from what the
/// transport costs. A benchmark baseline, not a product type.
/// </summary>
internal sealed class SocketPipeConnection : IAsyncDisposable
{
    // Kestrel's pool in miniature (Kestrel's own is internal): 4 KiB pinned arrays, so a gathering send can name them.
    // MemoryPool<byte>.Shared would measure ArrayPool's drops instead (222 MB allocated per 1 MiB x 64 echo in a first
    // run with it).
    private static readonly BlockPool s_pool = new();
    private static readonly PipeOptions s_inputOptions = new(s_pool, pauseWriterThreshold: 1024 * 1024, resumeWriterThreshold: 512 * 1024, minimumSegmentSize: 4096, useSynchronizationContext: false);
    private static readonly PipeOptions s_outputOptions = new(s_pool, pauseWriterThreshold: 64 * 1024, resumeWriterThreshold: 32 * 1024, minimumSegmentSize: 4096, useSynchronizationContext: false);

    private readonly Socket _socket;
    private readonly Pipe _input = new(s_inputOptions);
    private readonly Pipe _output = new(s_outputOptions);
    private readonly Task _receiving;
    private readonly Task _sending;

    public SocketPipeConnection(Socket socket)
    {
        _socket = socket;
        _receiving = ReceiveLoopAsync();
        _sending = SendLoopAsync();
    }

    public PipeReader Input => _input.Reader;

    public PipeWriter Output => _output.Writer;

    private async Task ReceiveLoopAsync()
    {
        PipeWriter writer = _input.Writer;
        Exception? error = null;
        try
        {
            while (true)
            {
                await _socket.ReceiveAsync(Memory<byte>.Empty, SocketFlags.None).ConfigureAwait(false); // wait for data
                int received = await _socket.ReceiveAsync(writer.GetMemory(), SocketFlags.None).ConfigureAwait(false);
                if (received == 0)
                {
                    break; // the peer's FIN
                }
                writer.Advance(received);
                FlushResult flush = await writer.FlushAsync().ConfigureAwait(false);
                if (flush.IsCompleted || flush.IsCanceled)
                {
                    break;
                }
            }
        }
        catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
        {
            error = ex;
        }
        await writer.CompleteAsync(error).ConfigureAwait(false);
    }

    private async Task SendLoopAsync()
    {
        PipeReader reader = _output.Reader;
        var gather = new List<ArraySegment<byte>>();
        try
        {
            while (true)
            {
                ReadResult result = await reader.ReadAsync().ConfigureAwait(false);
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (buffer.IsSingleSegment)
                {
                    await SendAllAsync(buffer.First).ConfigureAwait(false);
                }
                else if (!buffer.IsEmpty)
                {
                    gather.Clear();
                    foreach (ReadOnlyMemory<byte> segment in buffer)
                    {
                        gather.Add(MemoryMarshal.TryGetArray(segment, out ArraySegment<byte> array)
                            ? array
                            : throw new InvalidOperationException("The pipe's pool gave memory without an array."));
                    }
                    // A stream socket's send of a buffer list completes when all of it is sent.
                    await _socket.SendAsync(gather, SocketFlags.None).ConfigureAwait(false);
                }
                reader.AdvanceTo(buffer.End);
                if (result.IsCompleted || result.IsCanceled)
                {
                    break;
                }
            }
        }
        catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
        {
        }
        await reader.CompleteAsync().ConfigureAwait(false);
    }

    private async ValueTask SendAllAsync(ReadOnlyMemory<byte> bytes)
    {
        while (!bytes.IsEmpty)
        {
            bytes = bytes[await _socket.SendAsync(bytes, SocketFlags.None).ConfigureAwait(false)..];
        }
    }

    /// <summary>Abortive: closes the socket, which ends both loops.</summary>
    public async ValueTask DisposeAsync()
    {
        _socket.Dispose();
        _output.Reader.CancelPendingRead();
        _input.Writer.CancelPendingFlush();
        await Task.WhenAll(_receiving, _sending).ConfigureAwait(false);
    }

    /// <summary>4 KiB pinned arrays kept in a queue: no allocation per rent once warm, as Kestrel's pool.</summary>
    private sealed class BlockPool : MemoryPool<byte>
    {
        private const int Size = 4096;
        private readonly ConcurrentQueue<Block> _free = new();

        public override int MaxBufferSize => Size;

        public override IMemoryOwner<byte> Rent(int minBufferSize = -1)
        {
            ArgumentOutOfRangeException.ThrowIfGreaterThan(minBufferSize, Size);
            return _free.TryDequeue(out Block? block) ? block : new Block(this);
        }

        protected override void Dispose(bool disposing)
        {
        }

        private sealed class Block(BlockPool pool) : IMemoryOwner<byte>
        {
            public Memory<byte> Memory { get; } = GC.AllocateUninitializedArray<byte>(Size, pinned: true);

            public void Dispose() => pool._free.Enqueue(this);
        }
    }
}
