using System.Buffers;

namespace IoUring.Tests.Support;

/// <summary>A buffer that fills itself with 0xDD and counts when disposed, as a pool that poisons returned blocks
/// does: bytes read from it after its dispose show as poison.</summary>
internal sealed class PoisoningOwner(int size) : IMemoryOwner<byte>
{
    private readonly byte[] _array = new byte[size];
    private int _disposals;

    public int Disposals => Volatile.Read(ref _disposals);

    public Memory<byte> Memory => _array;

    public void Dispose()
    {
        _array.AsSpan().Fill(0xDD);
        Interlocked.Increment(ref _disposals);
    }
}
