namespace IoUring.Tests.Support;

/// <summary>Counts this process's open fds in /proc/self/fd, to prove nothing was left open.</summary>
internal static class FdCount
{
    public static int Current() => Directory.GetFileSystemEntries("/proc/self/fd").Length;

    /// <summary>
    /// The fds this library opens: sockets, rings and eventfds. (The total also moves when the runtime lazily opens
    /// files, e.g. symbol files the first time an exception's stack trace is resolved.)
    /// </summary>
    public static int Owned() => Matching("socket:") + Matching("[io_uring]") + Matching("[eventfd]");

    /// <summary>The fds whose link target matches <paramref name="fragment"/> (e.g. "io_uring", "eventfd").</summary>
    public static int Matching(string fragment)
    {
        int count = 0;
        foreach (string entry in Directory.GetFileSystemEntries("/proc/self/fd"))
        {
            try
            {
                string? target = new FileInfo(entry).LinkTarget;
                if (target is not null && target.Contains(fragment, StringComparison.Ordinal))
                {
                    count++;
                }
            }
            catch (IOException)
            {
                // closed while we looked
            }
        }
        return count;
    }
}
