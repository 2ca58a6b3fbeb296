using System.Diagnostics;
using System.Runtime.CompilerServices;

namespace IoUring.Loops;

/// <summary>
/// The 64-bit user_data of every SQE the loop submits:
/// <code>
///  63          48 47                                   3 2    0
/// [     tag      ][ GCHandle of the owner (8-aligned)   ][ kind ]
/// </code>
/// The GCHandle is the owner's address in the runtime's handle table: pointer-aligned, so its low 3 bits are
/// free for the operation kind, and a user-space address (below 2^47 on x86-64 and arm64 with 48-bit VAs), so its
/// top 16 bits are free for a 16-bit tag the owner picks per request: for a custom operation, the slot of its 64-bit
/// value in the loop's <see cref="CustomValueTable"/>; for a zero-copy send, which of the connection's pin sets it
/// holds. <see cref="RingOwner"/> checks both assumptions for every handle it allocates.
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

    /// <summary>Whether a GCHandle value leaves the kind and tag bits free.</summary>
    public static bool FitsHandle(nint handle) => ((ulong)handle & ~HandleMask) == 0 && handle != 0;
}
