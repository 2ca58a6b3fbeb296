using System.Diagnostics;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

namespace IoUring.Loops;

/// <summary>The 64-bit values of custom operations in flight, by slot (user_data's tag). A free slot holds the next
/// free slot's number, so rent and return are one array access each.</summary>
/// <remarks>Loop thread only. A struct, so its fields sit in the loop object: one dependent load less.</remarks>
internal struct CustomValueTable
{
    private const uint NoFreeSlot = uint.MaxValue;

    private ulong[] _values;
    private uint _freeHead;
    private int _next;          // slots below this have been handed out at least once

    public CustomValueTable()
    {
        _values = new ulong[64];
        _freeHead = NoFreeSlot;
    }

    /// <summary>Walks the free list: not for the hot path.</summary>
    public readonly int InUse
    {
        get
        {
            int free = 0;
            for (uint slot = _freeHead; slot != NoFreeSlot; slot = (uint)_values[slot])
            {
                free++;
            }
            return _next - free;
        }
    }

    /// <summary>Grows the table if needed, so the next <see cref="Rent"/> cannot fail.</summary>
    /// <exception cref="InvalidOperationException">All <see cref="UserData.MaxTags"/> slots are in use.</exception>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public void EnsureFreeSlot()
    {
        if (_freeHead == NoFreeSlot)
        {
            AddFreeSlot();
        }
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public uint Rent(ulong value)
    {
        uint slot = _freeHead;
        Debug.Assert(slot != NoFreeSlot, "EnsureFreeSlot first");
        // The array is read once; a slot from the free list is in range.
        ref ulong entry = ref Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(_values), slot);
        _freeHead = (uint)entry;
        entry = value;
        return slot;
    }

    /// <summary>With <paramref name="release"/> the slot is free again.</summary>
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public ulong Get(uint slot, bool release)
    {
        Debug.Assert(slot < (uint)_next, "a custom value slot never rented");
        ref ulong entry = ref Unsafe.Add(ref MemoryMarshal.GetArrayDataReference(_values), slot);
        ulong value = entry;
        if (release)
        {
            entry = _freeHead;
            _freeHead = slot;
        }
        return value;
    }

    [MethodImpl(MethodImplOptions.NoInlining)]
    private void AddFreeSlot()
    {
        if (_next == _values.Length)
        {
            if (_next == UserData.MaxTags)
            {
                throw new InvalidOperationException(
                    $"Too many custom operations in flight on one loop (the limit is {UserData.MaxTags}).");
            }
            Array.Resize(ref _values, _values.Length * 2);
        }
        uint slot = (uint)_next++;
        _values[slot] = NoFreeSlot; // the free list was empty: this slot is its only entry
        _freeHead = slot;
    }
}
