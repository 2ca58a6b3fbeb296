/*
 * launcher [--nofile N] [--memlock BYTES] [--user UID] [--no-io-uring | --kill-on-io-uring] [--lifetime SECONDS]
 *          [--cpu N] -- PROGRAM [ARGS...]
 *
 * Sets up the process the reliability tests need, then execs PROGRAM (same pid, so the test reads
 * /proc/<pid> of PROGRAM itself):
 *   --nofile N       RLIMIT_NOFILE soft and hard limit N.
 *   --memlock BYTES  RLIMIT_MEMLOCK soft and hard limit BYTES (what io_uring charges ring memory and zero-copy
 *                    sends' pinned pages to, for a process without CAP_IPC_LOCK).
 *   --user UID       PROGRAM runs as UID (group UID, no supplementary groups), so without root's capabilities:
 *                    CAP_IPC_LOCK no longer exempts it from RLIMIT_MEMLOCK. The working directory becomes /tmp (the
 *                    test's own is private to root).
 *   --no-io-uring    io_uring switched off for PROGRAM alone, the way a container runtime's seccomp profile
 *                    does: io_uring_setup, io_uring_enter and io_uring_register fail with EPERM. The global
 *                    sysctl (kernel.io_uring_disabled) is left alone, so tests running in parallel keep io_uring.
 *                    The filter is inherited across execve and by every thread PROGRAM starts.
 *   --kill-on-io-uring  The same filter, but the first io_uring call kills PROGRAM with SIGSYS: a run that ends
 *                    normally made none (what "no native call" tests observe).
 *   --lifetime S     SIGALRM after S seconds (an alarm survives execve): PROGRAM cannot outlive a test run
 *                    that died before it could kill it.
 *   --cpu N          PROGRAM may run on CPU N only (its affinity, inherited by its threads): a one-CPU server, as
 *                    .NET sees it (Environment.ProcessorCount 1).
 *
 * Exit codes of its own: 2 usage, 125 a setting could not be applied, 126 the seccomp filter did not take
 * effect, 127 PROGRAM could not be executed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <grp.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#else
#error "only x86_64 and aarch64 are handled"
#endif

/* Same numbers on x86_64 and aarch64 (the unified table since 5.1). */
_Static_assert(__NR_io_uring_setup == 425 && __NR_io_uring_enter == 426 && __NR_io_uring_register == 427,
               "unexpected io_uring syscall numbers");

/* action: SECCOMP_RET_ERRNO with EPERM, or SECCOMP_RET_KILL_PROCESS. */
static int deny_io_uring(unsigned int action)
{
    struct sock_filter filter[] = {
        /* Another ABI on this CPU (e.g. i386 via int 0x80) has other numbers: leave it alone. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        /* x32 calls share the arch value and set bit 30: treat them as the same call. */
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~0x40000000u),
#endif
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, action),
    };
    struct sock_fprog program = { .len = sizeof(filter) / sizeof(filter[0]), .filter = filter };

    /* Without root, a filter may be installed only under no_new_privs. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        fprintf(stderr, "launcher: PR_SET_NO_NEW_PRIVS: %s\n", strerror(errno));
        return 125;
    }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0) {
        fprintf(stderr, "launcher: PR_SET_SECCOMP: %s\n", strerror(errno));
        return 125;
    }
    if (action == SECCOMP_RET_KILL_PROCESS) {
        return 0; /* a check would kill this process: the tests' own control run shows the filter works */
    }
    /* Unfiltered, a NULL params pointer gives EFAULT: EPERM proves the filter answers. */
    errno = 0;
    if (syscall(__NR_io_uring_setup, 1, NULL) != -1 || errno != EPERM) {
        fprintf(stderr, "launcher: io_uring_setup is still reachable (errno %d)\n", errno);
        return 126;
    }
    return 0;
}

/* Soft and hard limit of resource to value (a decimal number). */
static int set_limit(int resource, const char *name, const char *value)
{
    rlim_t n = strtoul(value, NULL, 10);
    struct rlimit limit = { .rlim_cur = n, .rlim_max = n };
    if (setrlimit(resource, &limit) != 0) {
        fprintf(stderr, "launcher: %s %lu: %s\n", name, (unsigned long)n, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--nofile") == 0 && i + 1 < argc) {
            if (set_limit(RLIMIT_NOFILE, "RLIMIT_NOFILE", argv[++i]) != 0) {
                return 125;
            }
        } else if (strcmp(argv[i], "--memlock") == 0 && i + 1 < argc) {
            if (set_limit(RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", argv[++i]) != 0) {
                return 125;
            }
        } else if (strcmp(argv[i], "--user") == 0 && i + 1 < argc) {
            uid_t uid = (uid_t)strtoul(argv[++i], NULL, 10);
            if (setgroups(0, NULL) != 0 || setgid((gid_t)uid) != 0 || setuid(uid) != 0 || chdir("/tmp") != 0) {
                fprintf(stderr, "launcher: run as user %lu: %s\n", (unsigned long)uid, strerror(errno));
                return 125;
            }
        } else if (strcmp(argv[i], "--no-io-uring") == 0) {
            int rc = deny_io_uring(SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
            if (rc != 0) {
                return rc;
            }
        } else if (strcmp(argv[i], "--kill-on-io-uring") == 0) {
            int rc = deny_io_uring(SECCOMP_RET_KILL_PROCESS);
            if (rc != 0) {
                return rc;
            }
        } else if (strcmp(argv[i], "--lifetime") == 0 && i + 1 < argc) {
            alarm((unsigned)strtoul(argv[++i], NULL, 10));
        } else if (strcmp(argv[i], "--cpu") == 0 && i + 1 < argc) {
            cpu_set_t cpus;
            CPU_ZERO(&cpus);
            CPU_SET((int)strtoul(argv[++i], NULL, 10), &cpus);
            if (sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
                fprintf(stderr, "launcher: CPU %s: %s\n", argv[i], strerror(errno));
                return 125;
            }
        } else {
            fprintf(stderr, "launcher: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "usage: %s [--nofile N] [--memlock BYTES] [--user UID] [--no-io-uring | --kill-on-io-uring] "
                        "[--lifetime SECONDS] [--cpu N] -- PROGRAM [ARGS...]\n", argv[0]);
        return 2;
    }
    execvp(argv[i + 1], argv + i + 1);
    fprintf(stderr, "launcher: execvp %s: %s\n", argv[i + 1], strerror(errno));
    return 127;
}
