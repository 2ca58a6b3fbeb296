namespace IoUring.Buffers;

/// <summary>Registers a pool's regions with a ring and forgets them again (a loop, for its own pool).</summary>
internal interface IRegionRegistrar
{
    /// <summary>Any thread; until registered, the region's blocks are used unregistered.</summary>
    void Register(PinnedRegion region);

    /// <summary>A trimmed region (any thread; no block rented or pinned): empty its entry, and only then call
    /// <see cref="PinnedRegion.ReleasePages"/> (the kernel keeps pages a table holds).</summary>
    void Unregister(PinnedRegion region);
}
