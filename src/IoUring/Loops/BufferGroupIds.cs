namespace IoUring.Loops;

/// <summary>
/// Provided-buffer group ids, unique per process (the kernel's are per ring; this is simpler and as good). Each loop
/// and each UDP socket has one; freed ids are reused, so opening and closing sockets never runs out.
/// </summary>
internal static class BufferGroupIds
{
    private static readonly Lock s_lock = new();
    private static readonly Stack<ushort> s_free = new();
    private static int s_next;

    public static ushort Rent()
    {
        lock (s_lock)
        {
            if (s_free.TryPop(out ushort id))
            {
                return id;
            }
            if (s_next == ushort.MaxValue)
            {
                throw new InvalidOperationException("Every provided-buffer group id (65,535) is in use.");
            }
            return (ushort)++s_next;
        }
    }

    public static void Return(ushort id)
    {
        lock (s_lock)
        {
            s_free.Push(id);
        }
    }
}
