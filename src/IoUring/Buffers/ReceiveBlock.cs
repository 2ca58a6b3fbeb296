using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace IoUring.Buffers;

/// <summary>
/// One receive buffer's memory: a slice of an array on the pinned object heap, so its address never changes and a
/// reader holding it keeps it alive. Its length is the ring's buffer size.
/// </summary>
internal readonly struct ReceiveBlock(byte[] array, int offset)
{
    public byte[] Array { get; } = array;

    public int Offset { get; } = offset;

    /// <summary>Valid as long as the array lives.</summary>
    public unsafe nint Address => AddressOf(Array, Offset);

    public static unsafe nint AddressOf(byte[] pinnedArray, int offset)
        => (nint)Unsafe.AsPointer(ref Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(pinnedArray), offset));
}
