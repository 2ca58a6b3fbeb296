namespace IoUring.Buffers;

/// <summary>Registers a pool's regions with a ring and forgets them again (a loop, for its own pool).</summary>
internal interface IRegionRegistrar
{
    /// <summary>A new region (any thread): register it when possible; until then its blocks are used
    /// unregistered.</summary>
    void Register(PinnedRegion region);

    /// <summary>A trimmed region (any thread; none of its blocks rented or pinned): empty its entry, then
    /// <see cref="PinnedRegion.ReleasePages"/>, but only once the entry is empty (while a ring's table holds the pages,
    /// the kernel keeps them).</summary>
    void Unregister(PinnedRegion region);
}
