using System.Diagnostics;
using System.Runtime.CompilerServices;

namespace IoUring.Loops;

/// <summary>
/// The 64-bit user_data of every SQE the loop submits:
/// <code>
///  63          48 47                                   3 2    0
/// [     tag      ][ GCHandle of the owner (8-aligned)   ][ kind ]
/// </code>
/// A GCHandle is pointer-aligned (low 3 bits free) and a user-space address below 2^47 with 48-bit VAs (top 16 bits
/// free); <see cref="RingOwner"/> checks both. The tag is the owner's: a custom operation's
/// <see cref="CustomValueTable"/> slot, or a zero-copy send's pin set.
/// </summary>
internal static class UserData
{
    public const int KindBits = 3;
    public const ulong KindMask = (1UL << KindBits) - 1;
    public const int TagShift = 48;
    public const ulong HandleMask = ((1UL << TagShift) - 1) & ~KindMask;
    public const int MaxTags = 1 << (64 - TagShift);

    /// <summary>The kind of every custom (RingHandler) operation; internal owners use kinds 1 to 7.</summary>
    public const uint CustomKind = 0;

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static ulong Encode(ulong handleBits, uint kind, uint tag = 0)
    {
        Debug.Assert(kind <= KindMask && tag < MaxTags, "the kind or tag overflows its bits");
        return handleBits | kind | ((ulong)tag << TagShift);
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static nint Handle(ulong userData) => (nint)(userData & HandleMask);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static uint Kind(ulong userData) => (uint)(userData & KindMask);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static uint Tag(ulong userData) => (uint)(userData >> TagShift);

    public static bool FitsHandle(nint handle) => ((ulong)handle & ~HandleMask) == 0 && handle != 0;
}
