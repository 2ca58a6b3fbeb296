using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;

[assembly: DisableRuntimeMarshalling]

namespace IoUring.Interop;

/// <summary>
/// The libc entry points the library calls, the io_uring syscalls through <c>syscall(2)</c> (no liburing). A failed
/// call returns -1 and leaves errno for <see cref="Marshal.GetLastPInvokeError"/>.
/// </summary>
internal static unsafe partial class Libc
{
    private const string LibcName = "libc";

    // x86-64 and arm64 share these (asm-generic); AbiContractTests checks both architectures' headers.
    public const long SYS_io_uring_setup = 425;
    public const long SYS_io_uring_enter = 426;
    public const long SYS_io_uring_register = 427;

    public const int PROT_READ = 0x1;
    public const int PROT_WRITE = 0x2;
    public const int MAP_SHARED = 0x01;
    public const int MAP_POPULATE = 0x8000;
    public static readonly void* MAP_FAILED = (void*)-1;

    public const int EFD_CLOEXEC = 0x80000;
    public const int EFD_NONBLOCK = 0x800;

    [LibraryImport(LibcName, EntryPoint = "syscall", SetLastError = true)]
    private static partial long syscall_setup(long number, uint entries, io_uring_params* p);

    [LibraryImport(LibcName, EntryPoint = "syscall", SetLastError = true)]
    private static partial long syscall_enter(long number, int fd, uint toSubmit, uint minComplete, uint flags,
        void* arg, nuint argSize);

    [LibraryImport(LibcName, EntryPoint = "syscall", SetLastError = true)]
    private static partial long syscall_register(long number, int fd, uint opcode, void* arg, uint nrArgs);

    public static int io_uring_setup(uint entries, io_uring_params* p)
        => (int)syscall_setup(SYS_io_uring_setup, entries, p);

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static int io_uring_enter(int fd, uint toSubmit, uint minComplete, uint flags, void* arg, nuint argSize)
        => (int)syscall_enter(SYS_io_uring_enter, fd, toSubmit, minComplete, flags, arg, argSize);

    public static int io_uring_register(int fd, uint opcode, void* arg, uint nrArgs)
        => (int)syscall_register(SYS_io_uring_register, fd, opcode, arg, nrArgs);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial void* mmap(void* addr, nuint length, int prot, int flags, int fd, long offset);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int munmap(void* addr, nuint length);

    public const int MADV_DONTNEED = 4;

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int madvise(void* addr, nuint length, int advice);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int close(int fd);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int eventfd(uint initval, int flags);

    public const int SCHED_BATCH = 3;
    /// <summary>OR-ed into a policy: threads the caller creates start under the normal policy.</summary>
    public const int SCHED_RESET_ON_FORK = 0x40000000;

    // Numbers differ by architecture: the _<Architecture> suffix makes AbiContractTests check each against its own
    // header.
    public const long SYS_sched_setscheduler_X64 = 144;
    public const long SYS_sched_setscheduler_Arm64 = 119;

    [LibraryImport(LibcName, EntryPoint = "syscall", SetLastError = true)]
    private static partial long syscall_sched_setscheduler(long number, int tid, int policy, int* param);

    /// <summary>Sets thread <paramref name="tid"/>'s policy (0: the calling thread), by raw syscall where its number is
    /// known: musl's wrapper always fails with ENOSYS.</summary>
    public static int sched_setscheduler(int tid, int policy, int* param)
        => RuntimeInformation.ProcessArchitecture switch
        {
            Architecture.X64 => (int)syscall_sched_setscheduler(SYS_sched_setscheduler_X64, tid, policy, param),
            Architecture.Arm64 => (int)syscall_sched_setscheduler(SYS_sched_setscheduler_Arm64, tid, policy, param),
            _ => sched_setscheduler_libc(tid, policy, param),
        };

    [LibraryImport(LibcName, EntryPoint = "sched_setscheduler", SetLastError = true)]
    private static partial int sched_setscheduler_libc(int tid, int policy, int* param);

    /// <summary>Includes SCHED_RESET_ON_FORK; <paramref name="tid"/> 0 is the calling thread.</summary>
    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int sched_getscheduler(int tid);

    [LibraryImport(LibcName)]
    private static partial nuint pthread_self();

    [LibraryImport(LibcName)]
    private static partial int pthread_getattr_np(nuint thread, void* attr);

    [LibraryImport(LibcName)]
    private static partial int pthread_attr_getstack(void* attr, nuint* stackAddress, nuint* stackSize);

    [LibraryImport(LibcName)]
    private static partial int pthread_attr_destroy(void* attr);

    /// <summary>The calling thread's stack; false where libc cannot say.</summary>
    public static bool TryGetCurrentThreadStack(out nuint low, out nuint size)
    {
        low = 0;
        size = 0;
        byte* attr = stackalloc byte[256]; // pthread_attr_t: 56 bytes on x86-64 glibc, 64 on arm64; room to spare
        try
        {
            if (pthread_getattr_np(pthread_self(), attr) != 0)
            {
                return false;
            }
            nuint address, length;
            int result = pthread_attr_getstack(attr, &address, &length);
            pthread_attr_destroy(attr);
            if (result != 0 || length == 0)
            {
                return false;
            }
            (low, size) = (address, length);
            return true;
        }
        catch (EntryPointNotFoundException)
        {
            return false; // an older glibc keeps these in libpthread: the caller falls back to a thread-static test
        }
    }

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial nint write(int fd, void* buf, nuint count);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int socketpair(int domain, int type, int protocol, int* sv);

    [LibraryImport(LibcName, SetLastError = true)]
    public static partial int fcntl(int fd, int cmd, int arg);

    public const int F_GETFD = 1;
    public const int F_DUPFD_CLOEXEC = 1030;
    public const int FD_CLOEXEC = 1;
    public const int AF_UNIX = 1;
    public const int SOCK_STREAM = 1;
    public const int SOCK_CLOEXEC = 0x80000;
    public const int SOCK_NONBLOCK = 0x800;

    public static int GetLastErrno() => Marshal.GetLastPInvokeError();
}
