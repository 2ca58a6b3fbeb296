/*
 * Prints the machine's io_uring ABI as "name value" lines, for AbiContractTests to compare with
 * src/IoUring/Interop. Keys are the kernel's names:
 *
 *   sizeof(io_uring_sqe) 64              size of a struct
 *   offsetof(io_uring_sqe.user_data) 32  offset of a field (union members too)
 *   sizeof(io_uring_sqe.user_data) 8     size of a field
 *   IORING_OP_SEND_ZC 47                 value of a constant
 *   arch aarch64                         the architecture it was compiled for (AbiContractTests
 *                                        checks a cross build really is one)
 *   missing IORING_FEAT_NO_IOWAIT        this header is older than the constant or field
 *   within T.f T.g                       this header has no T.f; its bytes are T.g's (an older
 *                                        name, a sibling in the same union, or still reserved)
 *
 * The baseline is the 6.1 uapi header (Debian 12): everything in it is printed unconditionally,
 * except what came to 6.1 in a stable update (Debian's arm64 cross header is 6.1.4).
 * Newer macros are guarded with #ifdef. Newer enum members and struct fields can't be, so
 * AbiContractTests compiles each probe expression below on its own and passes -D<name> for
 * those that build (its output lists them as "probes built"). A hand build needs the same -D
 * flags: the fallback for an absent probe names the field an older header has instead.
 *
 * probe HAVE_IORING_OP_READ_MULTISHOT IORING_OP_READ_MULTISHOT
 * probe HAVE_IORING_REGISTER_PBUF_STATUS IORING_REGISTER_PBUF_STATUS
 * probe HAVE_IORING_REGISTER_USE_REGISTERED_RING IORING_REGISTER_USE_REGISTERED_RING
 * probe HAVE_IOU_PBUF_RING_MMAP IOU_PBUF_RING_MMAP
 * probe HAVE_IOU_PBUF_RING_INC IOU_PBUF_RING_INC
 * probe HAVE_SQE_NOP_FLAGS offsetof(struct io_uring_sqe, nop_flags)
 * probe HAVE_SQE_OPTLEN offsetof(struct io_uring_sqe, optlen)
 * probe HAVE_SQRING_USER_ADDR offsetof(struct io_sqring_offsets, user_addr)
 * probe HAVE_CQRING_USER_ADDR offsetof(struct io_cqring_offsets, user_addr)
 * probe HAVE_BUF_REG_FLAGS offsetof(struct io_uring_buf_reg, flags)
 * probe HAVE_BUF_REG_MIN_LEFT offsetof(struct io_uring_buf_reg, min_left)
 * probe HAVE_GETEVENTS_MIN_WAIT_USEC offsetof(struct io_uring_getevents_arg, min_wait_usec)
 */
#define _GNU_SOURCE /* SCHED_BATCH, SCHED_RESET_ON_FORK */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/udp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <linux/io_uring.h>
#include <linux/time_types.h>
#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 1, 0)
#error "linux/io_uring.h is older than 6.1, the oldest header this ABI dump supports"
#endif

#if defined(__aarch64__)
#define ARCH "aarch64"
#elif defined(__x86_64__)
#define ARCH "x86_64"
#else
#define ARCH "other"
#endif

#define SIZE(T) printf("sizeof(" #T ") %zu\n", sizeof(struct T))
#define FIELD(T, f)                                                        \
	do {                                                               \
		printf("offsetof(" #T "." #f ") %zu\n", offsetof(struct T, f)); \
		printf("sizeof(" #T "." #f ") %zu\n", sizeof(((struct T *)0)->f)); \
	} while (0)
/* (long long) keeps ~0U and 1U << 31 positive, as the C# uint constants are. */
#define CONST(name) printf(#name " %lld\n", (long long)(name))
#define MISSING(name) printf("missing " #name "\n")
#define WITHIN(T, f, g) printf("within " #T "." #f " " #T "." #g "\n")

static void structs(void)
{
	SIZE(io_uring_sqe);
	FIELD(io_uring_sqe, opcode);
	FIELD(io_uring_sqe, flags);
	FIELD(io_uring_sqe, ioprio);
	FIELD(io_uring_sqe, fd);
	FIELD(io_uring_sqe, off);
	FIELD(io_uring_sqe, addr2);
	FIELD(io_uring_sqe, addr);
	FIELD(io_uring_sqe, splice_off_in);
	FIELD(io_uring_sqe, len);
	FIELD(io_uring_sqe, rw_flags);
	FIELD(io_uring_sqe, msg_flags);
	FIELD(io_uring_sqe, accept_flags);
	FIELD(io_uring_sqe, cancel_flags);
	FIELD(io_uring_sqe, timeout_flags);
	FIELD(io_uring_sqe, poll32_events);
	FIELD(io_uring_sqe, msg_ring_flags);
#ifdef HAVE_SQE_NOP_FLAGS
	FIELD(io_uring_sqe, nop_flags);
#else
	MISSING(io_uring_sqe.nop_flags);
	WITHIN(io_uring_sqe, nop_flags, rw_flags);
#endif
	FIELD(io_uring_sqe, user_data);
	FIELD(io_uring_sqe, buf_index);
	FIELD(io_uring_sqe, buf_group);
	FIELD(io_uring_sqe, personality);
	FIELD(io_uring_sqe, splice_fd_in);
	FIELD(io_uring_sqe, file_index);
#ifdef HAVE_SQE_OPTLEN
	FIELD(io_uring_sqe, optlen);
#else
	MISSING(io_uring_sqe.optlen);
	WITHIN(io_uring_sqe, optlen, file_index);
#endif
	FIELD(io_uring_sqe, addr3);
	FIELD(io_uring_sqe, __pad2);

	SIZE(io_uring_cqe);
	FIELD(io_uring_cqe, user_data);
	FIELD(io_uring_cqe, res);
	FIELD(io_uring_cqe, flags);

	SIZE(io_sqring_offsets);
	FIELD(io_sqring_offsets, head);
	FIELD(io_sqring_offsets, tail);
	FIELD(io_sqring_offsets, ring_mask);
	FIELD(io_sqring_offsets, ring_entries);
	FIELD(io_sqring_offsets, flags);
	FIELD(io_sqring_offsets, dropped);
	FIELD(io_sqring_offsets, array);
	FIELD(io_sqring_offsets, resv1);
#ifdef HAVE_SQRING_USER_ADDR
	FIELD(io_sqring_offsets, user_addr);
#else
	FIELD(io_sqring_offsets, resv2);
	MISSING(io_sqring_offsets.user_addr);
	WITHIN(io_sqring_offsets, user_addr, resv2);
#endif

	SIZE(io_cqring_offsets);
	FIELD(io_cqring_offsets, head);
	FIELD(io_cqring_offsets, tail);
	FIELD(io_cqring_offsets, ring_mask);
	FIELD(io_cqring_offsets, ring_entries);
	FIELD(io_cqring_offsets, overflow);
	FIELD(io_cqring_offsets, cqes);
	FIELD(io_cqring_offsets, flags);
	FIELD(io_cqring_offsets, resv1);
#ifdef HAVE_CQRING_USER_ADDR
	FIELD(io_cqring_offsets, user_addr);
#else
	FIELD(io_cqring_offsets, resv2);
	MISSING(io_cqring_offsets.user_addr);
	WITHIN(io_cqring_offsets, user_addr, resv2);
#endif

	SIZE(io_uring_params);
	FIELD(io_uring_params, sq_entries);
	FIELD(io_uring_params, cq_entries);
	FIELD(io_uring_params, flags);
	FIELD(io_uring_params, sq_thread_cpu);
	FIELD(io_uring_params, sq_thread_idle);
	FIELD(io_uring_params, features);
	FIELD(io_uring_params, wq_fd);
	FIELD(io_uring_params, resv);
	FIELD(io_uring_params, sq_off);
	FIELD(io_uring_params, cq_off);

	SIZE(io_uring_buf);
	FIELD(io_uring_buf, addr);
	FIELD(io_uring_buf, len);
	FIELD(io_uring_buf, bid);
	FIELD(io_uring_buf, resv);

	SIZE(io_uring_buf_reg);
	FIELD(io_uring_buf_reg, ring_addr);
	FIELD(io_uring_buf_reg, ring_entries);
	FIELD(io_uring_buf_reg, bgid);
#ifdef HAVE_BUF_REG_FLAGS
	FIELD(io_uring_buf_reg, flags);
#else
	/* before 6.4 the flags were __u16 pad */
	FIELD(io_uring_buf_reg, pad);
	MISSING(io_uring_buf_reg.flags);
	WITHIN(io_uring_buf_reg, flags, pad);
#endif
#ifdef HAVE_BUF_REG_MIN_LEFT
	FIELD(io_uring_buf_reg, min_left);
	FIELD(io_uring_buf_reg, resv);
#else
	/* before min_left the tail was __u64 resv[3]; min_left and __u32 resv[5] were carved from it */
	FIELD(io_uring_buf_reg, resv);
	MISSING(io_uring_buf_reg.min_left);
	WITHIN(io_uring_buf_reg, min_left, resv);
	WITHIN(io_uring_buf_reg, resv, resv);
#endif

	SIZE(io_uring_rsrc_update);
	FIELD(io_uring_rsrc_update, offset);
	FIELD(io_uring_rsrc_update, resv);
	FIELD(io_uring_rsrc_update, data);
	SIZE(io_uring_rsrc_register);
	FIELD(io_uring_rsrc_register, nr);
	FIELD(io_uring_rsrc_register, flags);
	FIELD(io_uring_rsrc_register, resv2);
	FIELD(io_uring_rsrc_register, data);
	FIELD(io_uring_rsrc_register, tags);
	SIZE(io_uring_rsrc_update2);
	FIELD(io_uring_rsrc_update2, offset);
	FIELD(io_uring_rsrc_update2, resv);
	FIELD(io_uring_rsrc_update2, data);
	FIELD(io_uring_rsrc_update2, tags);
	FIELD(io_uring_rsrc_update2, nr);
	FIELD(io_uring_rsrc_update2, resv2);

	SIZE(io_uring_getevents_arg);
	FIELD(io_uring_getevents_arg, sigmask);
	FIELD(io_uring_getevents_arg, sigmask_sz);
#ifdef HAVE_GETEVENTS_MIN_WAIT_USEC
	FIELD(io_uring_getevents_arg, min_wait_usec);
#else
	FIELD(io_uring_getevents_arg, pad);
	MISSING(io_uring_getevents_arg.min_wait_usec);
	WITHIN(io_uring_getevents_arg, min_wait_usec, pad);
#endif
	FIELD(io_uring_getevents_arg, ts);

	SIZE(__kernel_timespec);
	FIELD(__kernel_timespec, tv_sec);
	FIELD(__kernel_timespec, tv_nsec);

	SIZE(io_uring_probe);
	FIELD(io_uring_probe, last_op);
	FIELD(io_uring_probe, ops_len);
	FIELD(io_uring_probe, resv);
	FIELD(io_uring_probe, resv2);

	SIZE(io_uring_probe_op);
	FIELD(io_uring_probe_op, op);
	FIELD(io_uring_probe_op, resv);
	FIELD(io_uring_probe_op, flags);
	FIELD(io_uring_probe_op, resv2);

	SIZE(io_uring_recvmsg_out);
	FIELD(io_uring_recvmsg_out, namelen);
	FIELD(io_uring_recvmsg_out, controllen);
	FIELD(io_uring_recvmsg_out, payloadlen);
	FIELD(io_uring_recvmsg_out, flags);

	SIZE(iovec);
	FIELD(iovec, iov_base);
	FIELD(iovec, iov_len);

	/* Socket structs the binding passes to the kernel (sendmsg, setsockopt): glibc's, the kernel's layout. */
	SIZE(msghdr);
	FIELD(msghdr, msg_name);
	FIELD(msghdr, msg_namelen);
	FIELD(msghdr, msg_iov);
	FIELD(msghdr, msg_iovlen);
	FIELD(msghdr, msg_control);
	FIELD(msghdr, msg_controllen);
	FIELD(msghdr, msg_flags);
	SIZE(cmsghdr);
	FIELD(cmsghdr, cmsg_len);
	FIELD(cmsghdr, cmsg_level);
	FIELD(cmsghdr, cmsg_type);
	SIZE(in_pktinfo);
	FIELD(in_pktinfo, ipi_ifindex);
	FIELD(in_pktinfo, ipi_spec_dst);
	FIELD(in_pktinfo, ipi_addr);
	SIZE(in6_pktinfo);
	FIELD(in6_pktinfo, ipi6_addr);
	FIELD(in6_pktinfo, ipi6_ifindex);
	SIZE(linger);
	FIELD(linger, l_onoff);
	FIELD(linger, l_linger);
}

static void constants(void)
{
	/* io_uring_setup flags */
	CONST(IORING_SETUP_IOPOLL);
	CONST(IORING_SETUP_SQPOLL);
	CONST(IORING_SETUP_SQ_AFF);
	CONST(IORING_SETUP_CQSIZE);
	CONST(IORING_SETUP_CLAMP);
	CONST(IORING_SETUP_ATTACH_WQ);
	CONST(IORING_SETUP_R_DISABLED);
	CONST(IORING_SETUP_SUBMIT_ALL);
	CONST(IORING_SETUP_COOP_TASKRUN);
	CONST(IORING_SETUP_TASKRUN_FLAG);
	CONST(IORING_SETUP_SQE128);
	CONST(IORING_SETUP_CQE32);
	CONST(IORING_SETUP_SINGLE_ISSUER);
	CONST(IORING_SETUP_DEFER_TASKRUN);
#ifdef IORING_SETUP_NO_MMAP
	CONST(IORING_SETUP_NO_MMAP);
#else
	MISSING(IORING_SETUP_NO_MMAP);
#endif
#ifdef IORING_SETUP_REGISTERED_FD_ONLY
	CONST(IORING_SETUP_REGISTERED_FD_ONLY);
#else
	MISSING(IORING_SETUP_REGISTERED_FD_ONLY);
#endif
#ifdef IORING_SETUP_NO_SQARRAY
	CONST(IORING_SETUP_NO_SQARRAY);
#else
	MISSING(IORING_SETUP_NO_SQARRAY);
#endif

	/* io_uring_params.features */
	CONST(IORING_FEAT_SINGLE_MMAP);
	CONST(IORING_FEAT_NODROP);
	CONST(IORING_FEAT_SUBMIT_STABLE);
	CONST(IORING_FEAT_FAST_POLL);
	CONST(IORING_FEAT_EXT_ARG);
	CONST(IORING_FEAT_NATIVE_WORKERS);
	CONST(IORING_FEAT_CQE_SKIP);
#ifdef IORING_FEAT_REG_REG_RING
	CONST(IORING_FEAT_REG_REG_RING);
#else
	MISSING(IORING_FEAT_REG_REG_RING);
#endif
#ifdef IORING_FEAT_RECVSEND_BUNDLE
	CONST(IORING_FEAT_RECVSEND_BUNDLE);
#else
	MISSING(IORING_FEAT_RECVSEND_BUNDLE);
#endif
#ifdef IORING_FEAT_MIN_TIMEOUT
	CONST(IORING_FEAT_MIN_TIMEOUT);
#else
	MISSING(IORING_FEAT_MIN_TIMEOUT);
#endif
#ifdef IORING_FEAT_NO_IOWAIT
	CONST(IORING_FEAT_NO_IOWAIT);
#else
	MISSING(IORING_FEAT_NO_IOWAIT);
#endif

	/* io_uring_enter flags */
	CONST(IORING_ENTER_GETEVENTS);
	CONST(IORING_ENTER_SQ_WAKEUP);
	CONST(IORING_ENTER_SQ_WAIT);
	CONST(IORING_ENTER_EXT_ARG);
	CONST(IORING_ENTER_REGISTERED_RING);
#ifdef IORING_ENTER_NO_IOWAIT
	CONST(IORING_ENTER_NO_IOWAIT);
#else
	MISSING(IORING_ENTER_NO_IOWAIT);
#endif

	/* sq_ring flags */
	CONST(IORING_SQ_NEED_WAKEUP);
	CONST(IORING_SQ_CQ_OVERFLOW);
	CONST(IORING_SQ_TASKRUN);

	/* sqe->flags */
	CONST(IOSQE_FIXED_FILE);
	CONST(IOSQE_IO_DRAIN);
	CONST(IOSQE_IO_LINK);
	CONST(IOSQE_IO_HARDLINK);
	CONST(IOSQE_ASYNC);
	CONST(IOSQE_BUFFER_SELECT);
	CONST(IOSQE_CQE_SKIP_SUCCESS);

	/* cqe->flags */
	CONST(IORING_CQE_F_BUFFER);
	CONST(IORING_CQE_F_MORE);
	CONST(IORING_CQE_F_SOCK_NONEMPTY);
	CONST(IORING_CQE_F_NOTIF);
#ifdef IORING_CQE_F_BUF_MORE
	CONST(IORING_CQE_F_BUF_MORE);
#else
	MISSING(IORING_CQE_F_BUF_MORE);
#endif
	CONST(IORING_CQE_BUFFER_SHIFT);

	/* opcodes (enum io_uring_op) */
	CONST(IORING_OP_NOP);
	CONST(IORING_OP_READV);
	CONST(IORING_OP_READ_FIXED);
	CONST(IORING_OP_WRITEV);
	CONST(IORING_OP_POLL_ADD);
	CONST(IORING_OP_POLL_REMOVE);
	CONST(IORING_OP_SENDMSG);
	CONST(IORING_OP_RECVMSG);
	CONST(IORING_OP_TIMEOUT);
	CONST(IORING_OP_TIMEOUT_REMOVE);
	CONST(IORING_OP_ACCEPT);
	CONST(IORING_OP_ASYNC_CANCEL);
	CONST(IORING_OP_LINK_TIMEOUT);
	CONST(IORING_OP_CONNECT);
	CONST(IORING_OP_CLOSE);
	CONST(IORING_OP_READ);
	CONST(IORING_OP_WRITE);
	CONST(IORING_OP_SEND);
	CONST(IORING_OP_RECV);
	CONST(IORING_OP_SPLICE);
	CONST(IORING_OP_PROVIDE_BUFFERS);
	CONST(IORING_OP_REMOVE_BUFFERS);
	CONST(IORING_OP_SHUTDOWN);
	CONST(IORING_OP_MSG_RING);
	CONST(IORING_OP_SOCKET);
	CONST(IORING_OP_SEND_ZC);
	CONST(IORING_OP_SENDMSG_ZC);
#ifdef HAVE_IORING_OP_READ_MULTISHOT
	CONST(IORING_OP_READ_MULTISHOT);
#else
	MISSING(IORING_OP_READ_MULTISHOT);
#endif

	/* sqe->ioprio for send/recv */
	CONST(IORING_RECVSEND_POLL_FIRST);
	CONST(IORING_RECV_MULTISHOT);
	CONST(IORING_RECVSEND_FIXED_BUF);
	CONST(IORING_SEND_ZC_REPORT_USAGE);
#ifdef IORING_RECVSEND_BUNDLE
	CONST(IORING_RECVSEND_BUNDLE);
#else
	MISSING(IORING_RECVSEND_BUNDLE);
#endif
	CONST(IORING_NOTIF_USAGE_ZC_COPIED);

	/* sqe->ioprio for accept */
	CONST(IORING_ACCEPT_MULTISHOT);
#ifdef IORING_ACCEPT_DONTWAIT
	CONST(IORING_ACCEPT_DONTWAIT);
#else
	MISSING(IORING_ACCEPT_DONTWAIT);
#endif
#ifdef IORING_ACCEPT_POLL_FIRST
	CONST(IORING_ACCEPT_POLL_FIRST);
#else
	MISSING(IORING_ACCEPT_POLL_FIRST);
#endif

	/* sqe->cancel_flags (USERDATA and OP came to 6.1 in a stable update: Debian's arm64 cross header, 6.1.4, lacks them) */
	CONST(IORING_ASYNC_CANCEL_ALL);
	CONST(IORING_ASYNC_CANCEL_FD);
	CONST(IORING_ASYNC_CANCEL_ANY);
	CONST(IORING_ASYNC_CANCEL_FD_FIXED);
#ifdef IORING_ASYNC_CANCEL_USERDATA
	CONST(IORING_ASYNC_CANCEL_USERDATA);
#else
	MISSING(IORING_ASYNC_CANCEL_USERDATA);
#endif
#ifdef IORING_ASYNC_CANCEL_OP
	CONST(IORING_ASYNC_CANCEL_OP);
#else
	MISSING(IORING_ASYNC_CANCEL_OP);
#endif

	/* sqe->timeout_flags */
	CONST(IORING_TIMEOUT_ABS);
#ifdef IORING_TIMEOUT_MULTISHOT
	CONST(IORING_TIMEOUT_MULTISHOT);
#else
	MISSING(IORING_TIMEOUT_MULTISHOT);
#endif

	/* sqe->nop_flags */
#ifdef IORING_NOP_INJECT_RESULT
	CONST(IORING_NOP_INJECT_RESULT);
#else
	MISSING(IORING_NOP_INJECT_RESULT);
#endif

	CONST(IORING_FILE_INDEX_ALLOC);

	/* io_uring_register opcodes */
	CONST(IORING_REGISTER_EVENTFD);
	CONST(IORING_REGISTER_PROBE);
	CONST(IORING_REGISTER_ENABLE_RINGS);
	CONST(IORING_REGISTER_BUFFERS2);
	CONST(IORING_REGISTER_BUFFERS_UPDATE);
	CONST(IORING_UNREGISTER_BUFFERS);
	CONST(IORING_RSRC_REGISTER_SPARSE);
	CONST(IORING_REGISTER_RING_FDS);
	CONST(IORING_UNREGISTER_RING_FDS);
	CONST(IORING_REGISTER_PBUF_RING);
	CONST(IORING_UNREGISTER_PBUF_RING);
	CONST(IORING_REGISTER_SYNC_CANCEL);
#ifdef HAVE_IORING_REGISTER_PBUF_STATUS
	CONST(IORING_REGISTER_PBUF_STATUS);
#else
	MISSING(IORING_REGISTER_PBUF_STATUS);
#endif
#ifdef HAVE_IORING_REGISTER_USE_REGISTERED_RING
	CONST(IORING_REGISTER_USE_REGISTERED_RING);
#else
	MISSING(IORING_REGISTER_USE_REGISTERED_RING);
#endif

	CONST(IO_URING_OP_SUPPORTED);

	/* io_uring_buf_reg.flags */
#ifdef HAVE_IOU_PBUF_RING_MMAP
	CONST(IOU_PBUF_RING_MMAP);
#else
	MISSING(IOU_PBUF_RING_MMAP);
#endif
#ifdef HAVE_IOU_PBUF_RING_INC
	CONST(IOU_PBUF_RING_INC);
#else
	MISSING(IOU_PBUF_RING_INC);
#endif

	/* mmap offsets */
	CONST(IORING_OFF_SQ_RING);
	CONST(IORING_OFF_CQ_RING);
	CONST(IORING_OFF_SQES);

	/* io_uring syscall numbers (Libc.cs): glibc's SYS_ names for the kernel's per-architecture __NR_ numbers */
	CONST(SYS_io_uring_setup);
	CONST(SYS_io_uring_enter);
	CONST(SYS_io_uring_register);
	CONST(SYS_sched_setscheduler);

	/* the rest of Libc's constants (Libc.cs, Libc.Sockets.cs): glibc's names for the kernel's values, some of which
	   differ by architecture (O_*, MAP_*, SO_* on several), so each is printed for each target */
	CONST(PROT_READ);
	CONST(PROT_WRITE);
	CONST(MAP_SHARED);
	CONST(MAP_POPULATE);
	CONST(MADV_DONTNEED);
	CONST(EFD_CLOEXEC);
	CONST(EFD_NONBLOCK);
	CONST(SCHED_BATCH);
	CONST(SCHED_RESET_ON_FORK);
	CONST(F_GETFD);
	CONST(F_DUPFD_CLOEXEC);
	CONST(FD_CLOEXEC);
	CONST(AF_UNIX);
	CONST(AF_INET);
	CONST(AF_INET6);
	CONST(SOCK_STREAM);
	CONST(SOCK_CLOEXEC);
	CONST(SOCK_NONBLOCK);
	CONST(SOL_SOCKET);
	CONST(SOL_UDP);
	CONST(UDP_SEGMENT);
	CONST(UDP_GRO);
	CONST(SOL_IP);
	CONST(IP_PKTINFO);
	CONST(SOL_IPV6);
	CONST(IPV6_RECVPKTINFO);
	CONST(IPV6_PKTINFO);
	CONST(SO_LINGER);
	CONST(IPPROTO_TCP);
	CONST(TCP_NODELAY);
	CONST(MSG_NOSIGNAL);
	CONST(MSG_TRUNC);
	CONST(MSG_DONTWAIT);
	CONST(SHUT_WR);
	/* the pipe file sends splice through (Libc.Files.cs) */
	CONST(O_NONBLOCK);
	CONST(O_CLOEXEC);
	CONST(F_SETPIPE_SZ);
	CONST(F_GETPIPE_SZ);

	/* errno (Errno.cs) */
	CONST(EPERM);
	CONST(ENOENT);
	CONST(EINTR);
	CONST(EIO);
	CONST(EBADF);
	CONST(EAGAIN);
	CONST(ENOMEM);
	CONST(EBUSY);
	CONST(EEXIST);
	CONST(EINVAL);
	CONST(ENFILE);
	CONST(EMFILE);
	CONST(EPIPE);
	CONST(ENOSYS);
	CONST(EBADR);
	CONST(ETIME);
	CONST(EMSGSIZE);
	CONST(ECONNRESET);
	CONST(ENOBUFS);
	CONST(EALREADY);
	CONST(ECANCELED);
	CONST(EACCES);
	CONST(EAFNOSUPPORT);
	CONST(EADDRINUSE);
	CONST(EADDRNOTAVAIL);
	CONST(ENETDOWN);
	CONST(ENETUNREACH);
	CONST(ECONNABORTED);
	CONST(EISCONN);
	CONST(ENOTCONN);
	CONST(ETIMEDOUT);
	CONST(ECONNREFUSED);
	CONST(EHOSTDOWN);
	CONST(EHOSTUNREACH);
	CONST(EINPROGRESS);
}

int main(void)
{
	printf("header %d.%d\n", LINUX_VERSION_CODE >> 16, (LINUX_VERSION_CODE >> 8) & 0xff);
	printf("arch %s\n", ARCH);
	structs();
	constants();
	return 0;
}
