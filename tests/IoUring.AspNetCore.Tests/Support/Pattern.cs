using System.Security.Cryptography;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>
/// Deterministic test bytes: a random block of a size prime to every buffer size, repeated, so a lost, duplicated
/// or reordered buffer changes the hash.
/// </summary>
public static class Pattern
{
    private const int BlockSize = (1 << 20) + 7;
    private static readonly byte[] s_block = MakeBlock();
    private static readonly System.Collections.Concurrent.ConcurrentDictionary<long, string> s_hashes = new();

    private static byte[] MakeBlock()
    {
        var block = new byte[BlockSize];
        new Random(20240601).NextBytes(block);
        return block;
    }

    /// <summary>Copies the pattern bytes starting at <paramref name="offset"/> into <paramref name="destination"/>.</summary>
    public static void Fill(long offset, Span<byte> destination)
    {
        while (!destination.IsEmpty)
        {
            int start = (int)(offset % BlockSize);
            int count = Math.Min(BlockSize - start, destination.Length);
            s_block.AsSpan(start, count).CopyTo(destination);
            destination = destination[count..];
            offset += count;
        }
    }

    /// <summary>The SHA-256 of the first <paramref name="length"/> pattern bytes, as lowercase hex.</summary>
    public static string Sha256(long length) => s_hashes.GetOrAdd(length, ComputeSha256);

    private static string ComputeSha256(long length)
    {
        using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        byte[] buffer = new byte[1 << 16];
        for (long offset = 0; offset < length; offset += buffer.Length)
        {
            int count = (int)Math.Min(buffer.Length, length - offset);
            Fill(offset, buffer.AsSpan(0, count));
            hash.AppendData(buffer, 0, count);
        }
        return Convert.ToHexStringLower(hash.GetHashAndReset());
    }

    /// <summary>Reads <paramref name="body"/> to its end: how many bytes it gave and their SHA-256 (lowercase hex), to compare with <see cref="Sha256"/>.</summary>
    public static async Task<(long Length, string Hash)> HashAsync(Stream body)
    {
        using var hash = IncrementalHash.CreateHash(HashAlgorithmName.SHA256);
        byte[] buffer = new byte[1 << 16];
        long total = 0;
        int n;
        while ((n = await body.ReadAsync(buffer)) > 0)
        {
            hash.AppendData(buffer, 0, n);
            total += n;
        }
        return (total, Convert.ToHexStringLower(hash.GetHashAndReset()));
    }

    /// <summary>An upload body of <paramref name="length"/> pattern bytes, written in chunks of <paramref name="chunk"/>; chunked encoding when <paramref name="chunked"/>.</summary>
    public static HttpContent Content(long length, int chunk = 1 << 16, bool chunked = false) => new PatternContent(length, chunk, chunked);

    /// <summary>The pattern bytes from <paramref name="offset"/> on, as an array.</summary>
    public static byte[] Bytes(long offset, int length)
    {
        byte[] bytes = new byte[length];
        Fill(offset, bytes);
        return bytes;
    }

    private sealed class PatternContent : HttpContent
    {
        private readonly long _length;
        private readonly int _chunk;
        private readonly bool _chunked;

        public PatternContent(long length, int chunk, bool chunked)
        {
            _length = length;
            _chunk = chunk;
            _chunked = chunked;
        }

        protected override async Task SerializeToStreamAsync(Stream stream, System.Net.TransportContext? context)
        {
            byte[] buffer = new byte[_chunk];
            for (long offset = 0; offset < _length; offset += _chunk)
            {
                int count = (int)Math.Min(_chunk, _length - offset);
                Fill(offset, buffer.AsSpan(0, count));
                await stream.WriteAsync(buffer.AsMemory(0, count));
            }
        }

        protected override bool TryComputeLength(out long length)
        {
            length = _length;
            return !_chunked;
        }
    }
}
