using System.Runtime.InteropServices;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>
/// Counts the opens of one file by any process, as the kernel reports them (inotify's IN_OPEN): what a server does
/// with a file, seen from outside its code.
/// </summary>
internal sealed partial class FileOpenWatch : IDisposable
{
    private const int IN_NONBLOCK = 0x800;
    private const int IN_CLOEXEC = 0x80000;
    private const uint IN_OPEN = 0x20;
    private const uint IN_CLOSE = 0x08 | 0x10;
    private const int EAGAIN = 11;
    private readonly int _fd;

    public FileOpenWatch(string path)
    {
        _fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        // Closes too: the kernel merges an event into an identical one still unread, so opens alone would count one.
        if (_fd < 0 || inotify_add_watch(_fd, path, IN_OPEN | IN_CLOSE) < 0)
        {
            int errno = Marshal.GetLastPInvokeError();
            Dispose();
            throw new IOException($"inotify on '{path}' failed: errno {errno}");
        }
    }

    /// <summary>The opens since the last call (each event is read once).</summary>
    public unsafe int TakeOpens()
    {
        int opens = 0;
        byte* buffer = stackalloc byte[4096];
        while (true)
        {
            nint n = read(_fd, buffer, 4096);
            if (n < 0)
            {
                int errno = Marshal.GetLastPInvokeError();
                return errno == EAGAIN ? opens : throw new IOException($"reading inotify events failed: errno {errno}");
            }
            // struct inotify_event: int wd; uint32 mask; uint32 cookie; uint32 len; char name[len]
            for (nint at = 0; at < n; at += 16 + (nint)(*(uint*)(buffer + at + 12)))
            {
                if ((*(uint*)(buffer + at + 4) & IN_OPEN) != 0)
                {
                    opens++;
                }
            }
        }
    }

    public void Dispose()
    {
        if (_fd >= 0)
        {
            close(_fd);
        }
    }

    [LibraryImport("libc", SetLastError = true)]
    private static partial int inotify_init1(int flags);

    [LibraryImport("libc", SetLastError = true, StringMarshalling = StringMarshalling.Utf8)]
    private static partial int inotify_add_watch(int fd, string path, uint mask);

    [LibraryImport("libc", SetLastError = true)]
    private static unsafe partial nint read(int fd, byte* buffer, nint count);

    [LibraryImport("libc")]
    private static partial int close(int fd);
}
