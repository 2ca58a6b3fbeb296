using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace IoUring.Loops;

/// <summary>
/// The caller's 64-bit values of custom operations in flight, by slot (user_data's top 16 bits). A free list
/// makes rent and return O(1); the arrays grow during warm-up only, so steady state allocates nothing.
/// </summary>
/// <remarks>Loop thread only.</remarks>
internal sealed class CustomValueTable
{
    private ulong[] _values = new ulong[64];
    private ushort[] _free = new ushort[64];
    private int _freeCount;
    private int _next;          // slots below this have been handed out at least once

    public int InUse => _next - _freeCount;

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public uint Rent(ulong value)
    {
        uint slot = _freeCount > 0 ? Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(_free), --_freeCount) : RentNew();
        Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(_values), slot) = value; // slot < _next <= _values.Length
        return slot;
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public ulong Get(uint slot) => Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(_values), slot); // slot came from Rent: in range

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void Return(uint slot) => Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(_free), _freeCount++) = (ushort)slot; // at most _next slots are out

    private uint RentNew()
    {
        if (_next == _values.Length)
        {
            if (_next == UserData.MaxSlots)
            {
                throw new InvalidOperationException($"Too many custom operations in flight on one loop (the limit is {UserData.MaxSlots}).");
            }
            Array.Resize(ref _values, _values.Length * 2);
            Array.Resize(ref _free, _free.Length * 2);
        }
        return (uint)_next++;
    }
}
