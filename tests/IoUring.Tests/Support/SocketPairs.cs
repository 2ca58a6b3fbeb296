using System.Runtime.InteropServices;
using IoUring.Interop;

namespace IoUring.Tests.Support;

/// <summary>Connected AF_UNIX stream socket pairs for tests that drive a ring by hand.</summary>
internal static unsafe partial class SocketPairs
{
    public static (int Reader, int Writer) Create()
    {
        int* fds = stackalloc int[2];
        Assert.Equal(0, Libc.socketpair(Libc.AF_UNIX, Libc.SOCK_STREAM | Libc.SOCK_CLOEXEC, 0, fds));
        return (fds[0], fds[1]);
    }

    public static void Write(int fd, byte value) => Assert.Equal(1, (int)Libc.write(fd, &value, 1));

    /// <summary>Bytes waiting to be read on <paramref name="fd"/> (FIONREAD).</summary>
    public static int Queued(int fd)
    {
        Assert.Equal(0, ioctl(fd, 0x541B /* FIONREAD */, out int queued));
        return queued;
    }

    [LibraryImport("libc", SetLastError = true)]
    private static partial int ioctl(int fd, ulong request, out int value);
}
