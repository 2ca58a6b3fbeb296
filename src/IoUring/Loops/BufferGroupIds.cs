namespace IoUring.Loops;

/// <summary>
/// Provided-buffer group ids (16 bits, per ring in the kernel; unique per process here, which is simpler and as good):
/// each loop has one group, and each UDP socket one of its own, so ids come and go. A freed id is reused, so a process
/// that opens and closes sockets for ever never runs out; a group id still registered is never handed out twice.
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
