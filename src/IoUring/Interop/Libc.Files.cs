using System.Runtime.InteropServices;

namespace IoUring.Interop;

#pragma warning disable CS8981, IDE1006 // kernel names

/// <summary>The pipe a connection's file send splices through (Net/Tcp/Send/FileSender).</summary>
internal static unsafe partial class Libc
{
    public const int O_NONBLOCK = 0x800;
    public const int O_CLOEXEC = 0x80000;
    public const int F_SETPIPE_SZ = 1031;
    public const int F_GETPIPE_SZ = 1032;

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int pipe2(int* fds, int flags);
}
