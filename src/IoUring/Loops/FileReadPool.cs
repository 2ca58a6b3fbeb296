using System.Collections.Concurrent;
using System.Runtime.Versioning;

namespace IoUring.Loops;

/// <summary>A loop's reusable <see cref="FileRead"/>s; any thread.</summary>
[SupportedOSPlatform("linux")]
internal sealed class FileReadPool(EventLoop loop)
{
    private const int MaxPooled = 256;

    private readonly ConcurrentQueue<FileRead> _reads = new();
    private int _count;

    public FileRead Rent()
    {
        if (_reads.TryDequeue(out FileRead? read))
        {
            Interlocked.Decrement(ref _count);
            return read;
        }
        return new FileRead(loop);
    }

    public void Return(FileRead read)
    {
        if (Interlocked.Increment(ref _count) <= MaxPooled)
        {
            _reads.Enqueue(read);
        }
        else
        {
            Interlocked.Decrement(ref _count);
        }
    }
}
