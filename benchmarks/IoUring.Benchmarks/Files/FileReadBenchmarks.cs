using System.Buffers;
using System.Diagnostics;
using BenchmarkDotNet.Attributes;
using BenchmarkDotNet.Configs;
using IoUring.Benchmarks.Support;
using IoUring.Loops;
using Microsoft.Win32.SafeHandles;

namespace IoUring.Benchmarks.Files;

/// <summary>
/// Reads of a file already in the page cache: <see cref="EventLoop.ReadAsync"/> (an io_uring READ on the loop's ring,
/// READ_FIXED where the buffer is a registered block of the loop's pool) against
/// <see cref="RandomAccess.ReadAsync(SafeFileHandle, Memory{byte}, long, CancellationToken)"/> (on Linux a pread on a
/// thread-pool worker), at <see cref="QueueDepth"/> reads in flight of <see cref="Size"/> bytes each. One operation is
/// one read: time per read, MB/s its size over that time, Allocated the managed bytes per read; Ratio is the loop's
/// time over RandomAccess's.
/// </summary>
/// <remarks>
/// <para>The file: 64 MiB of random bytes made in <c>/tmp</c> at setup (written, so its pages are cached) and read
/// through once, deleted at cleanup. Reads walk it in <see cref="Size"/> steps from a cursor shared by all reads in
/// flight (each read its own offset), wrapping at the end: every read is a page-cache copy, never the disk.</para>
/// <para>Buffers, one per read in flight and the same kind for both readers: at 4 KiB a block of the loop's
/// <see cref="EventLoop.MemoryPool"/> (4 KiB blocks, as the Kestrel transport uses; registered with the ring, which
/// setup waits for, so the loop's read can be READ_FIXED); at 1 MiB, larger than any block, a pinned array
/// (<see cref="GC.AllocateArray{T}(int, bool)"/>).</para>
/// <para>A queue depth of 1 is one read after another (the latency of a read and its completion's hand-off); 32 keeps
/// 32 reads in flight, each lane issuing its next read when its last one completed, until the invocation's
/// <see cref="OperationsPerInvoke"/> reads are done. The machine's other load shows in the spread: run it alone.
/// Command: <c>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --filter '*FileReadBenchmarks*'</c>.</para>
/// </remarks>
[MemoryDiagnoser(displayGenColumns: false)]
[Config(typeof(Config))]
public class FileReadBenchmarks
{
    /// <summary>Reads per benchmark invocation: a multiple of every queue depth.</summary>
    public const int OperationsPerInvoke = 256;

    private const long FileLength = 64L * 1024 * 1024;
    private const int BlockSize = 4096;

    private EventLoop _loop = null!;
    private SafeFileHandle _file = null!;
    private string _path = null!;
    private IMemoryOwner<byte>[] _blocks = [];
    private Memory<byte>[] _buffers = [];
    private Task[] _lanes = [];
    private long _slots;
    private long _cursor;
    private int _remaining;

    /// <summary>Reads in flight.</summary>
    [Params(1, 32)]
    public int QueueDepth { get; set; }

    /// <summary>Bytes per read.</summary>
    [Params(4096, 1024 * 1024)]
    public int Size { get; set; }

    [GlobalSetup]
    public void Setup()
    {
        _loop = new EventLoop(new EventLoopOptions { MemoryBlockSize = BlockSize });
        _path = Path.Combine("/tmp", $"iouring-fileread-{Environment.ProcessId}.bin");
        WriteFile(_path);
        _file = File.OpenHandle(_path, FileMode.Open, FileAccess.Read, FileShare.Read, FileOptions.Asynchronous);
        ReadThrough();
        _slots = FileLength / Size;

        _buffers = new Memory<byte>[QueueDepth];
        _lanes = new Task[QueueDepth];
        if (Size <= BlockSize)
        {
            _blocks = new IMemoryOwner<byte>[QueueDepth];
            for (int i = 0; i < QueueDepth; i++)
            {
                _blocks[i] = _loop.MemoryPool.Rent(Size);
                _buffers[i] = _blocks[i].Memory[..Size];
            }
            Console.WriteLine($"// FileReadBenchmarks: {QueueDepth} pool blocks, registered with the ring: {WaitForRegistration()}");
        }
        else
        {
            for (int i = 0; i < QueueDepth; i++)
            {
                _buffers[i] = GC.AllocateArray<byte>(Size, pinned: true);
            }
        }
        CheckSameBytes();
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        _file.Dispose();
        File.Delete(_path);
        foreach (IMemoryOwner<byte> block in _blocks)
        {
            block.Dispose();
        }
        _loop.Dispose();
    }

    [Benchmark(Baseline = true, OperationsPerInvoke = OperationsPerInvoke)]
    public Task RandomAccessRead() => Run(static (self, buffer) => self.RandomAccessLane(buffer));

    [Benchmark(OperationsPerInvoke = OperationsPerInvoke)]
    public Task LoopRead() => Run(static (self, buffer) => self.LoopLane(buffer));

    private Task Run(Func<FileReadBenchmarks, Memory<byte>, Task> lane)
    {
        _remaining = OperationsPerInvoke;
        if (QueueDepth == 1)
        {
            return lane(this, _buffers[0]);
        }
        for (int i = 0; i < _lanes.Length; i++)
        {
            _lanes[i] = lane(this, _buffers[i]);
        }
        return Task.WhenAll(_lanes);
    }

    private async Task LoopLane(Memory<byte> buffer)
    {
        while (Interlocked.Decrement(ref _remaining) >= 0)
        {
            int read = await _loop.ReadAsync(_file, buffer, NextOffset());
            if (read != buffer.Length)
            {
                Fail.Check($"EventLoop.ReadAsync read {read} bytes, not {buffer.Length}.");
            }
        }
    }

    private async Task RandomAccessLane(Memory<byte> buffer)
    {
        while (Interlocked.Decrement(ref _remaining) >= 0)
        {
            int read = await RandomAccess.ReadAsync(_file, buffer, NextOffset());
            if (read != buffer.Length)
            {
                Fail.Check($"RandomAccess.ReadAsync read {read} bytes, not {buffer.Length}.");
            }
        }
    }

    /// <summary>The next read's offset: the shared cursor's slot, so every read in flight reads its own part.</summary>
    private long NextOffset() => (Interlocked.Increment(ref _cursor) % _slots) * Size;

    private static void WriteFile(string path)
    {
        var random = new Random(42);
        byte[] chunk = new byte[1024 * 1024];
        using FileStream stream = File.Create(path);
        for (long written = 0; written < FileLength; written += chunk.Length)
        {
            random.NextBytes(chunk);
            stream.Write(chunk);
        }
    }

    /// <summary>Reads the whole file once: every page in the cache before the first measured read.</summary>
    private void ReadThrough()
    {
        byte[] chunk = new byte[1024 * 1024];
        for (long offset = 0; offset < FileLength; offset += chunk.Length)
        {
            RandomAccess.Read(_file, chunk, offset);
        }
    }

    /// <summary>Whether the loop registered every pool block's region with its ring (it does so on the loop thread
    /// shortly after the region's first use), waiting up to 5 s; false where the kernel refused (RLIMIT_MEMLOCK).</summary>
    private bool WaitForRegistration()
    {
        var watch = Stopwatch.StartNew();
        while (true)
        {
            var registered = new TaskCompletionSource<bool>();
            _loop.Schedule(_ => registered.SetResult(_buffers.All(b => _loop.TryGetRegisteredBuffer(b, out ushort _))), null);
            if (registered.Task.Result)
            {
                return true;
            }
            if (watch.Elapsed > TimeSpan.FromSeconds(5))
            {
                return false;
            }
            Thread.Sleep(10);
        }
    }

    /// <summary>Both readers read the same bytes at an offset past the start (a wrong offset or length fails here).</summary>
    private void CheckSameBytes()
    {
        long offset = FileLength - Size;
        Memory<byte> buffer = _buffers[0];
        buffer.Span.Clear();
        int read = _loop.ReadAsync(_file, buffer, offset).AsTask().GetAwaiter().GetResult();
        byte[] expected = new byte[Size];
        int expectedRead = RandomAccess.Read(_file, expected, offset);
        if (read != Size || expectedRead != Size || !buffer.Span.SequenceEqual(expected))
        {
            Fail.Check($"EventLoop.ReadAsync at {offset}: {read} bytes, RandomAccess.Read {expectedRead}; the bytes differ.");
        }
    }

    private sealed class Config : ManualConfig
    {
        public Config() => AddColumn(new ThroughputColumn(nameof(Size)));
    }
}
