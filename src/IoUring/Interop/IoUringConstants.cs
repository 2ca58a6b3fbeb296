namespace IoUring.Interop;

// The kernel's names and values; tests/IoUring.Tests/Abi compares each with the machine's <linux/io_uring.h>.
#pragma warning disable CA1707 // kernel names keep their underscores

/// <summary>io_uring constants with the kernel's names and values, for what a <c>RingHandler</c> puts in an SQE or
/// reads from a CQE.</summary>
public static class IoUringConstants
{
    // io_uring_setup flags
    internal const uint IORING_SETUP_IOPOLL = 1u << 0;
    internal const uint IORING_SETUP_SQPOLL = 1u << 1;
    internal const uint IORING_SETUP_SQ_AFF = 1u << 2;
    internal const uint IORING_SETUP_CQSIZE = 1u << 3;
    internal const uint IORING_SETUP_CLAMP = 1u << 4;
    internal const uint IORING_SETUP_ATTACH_WQ = 1u << 5;
    internal const uint IORING_SETUP_R_DISABLED = 1u << 6;
    internal const uint IORING_SETUP_SUBMIT_ALL = 1u << 7;
    internal const uint IORING_SETUP_COOP_TASKRUN = 1u << 8;
    internal const uint IORING_SETUP_TASKRUN_FLAG = 1u << 9;
    internal const uint IORING_SETUP_SQE128 = 1u << 10;
    internal const uint IORING_SETUP_CQE32 = 1u << 11;
    internal const uint IORING_SETUP_SINGLE_ISSUER = 1u << 12;
    internal const uint IORING_SETUP_DEFER_TASKRUN = 1u << 13;
    internal const uint IORING_SETUP_NO_MMAP = 1u << 14;
    internal const uint IORING_SETUP_REGISTERED_FD_ONLY = 1u << 15;
    internal const uint IORING_SETUP_NO_SQARRAY = 1u << 16;

    // io_uring_params.features
    internal const uint IORING_FEAT_SINGLE_MMAP = 1u << 0;
    internal const uint IORING_FEAT_NODROP = 1u << 1;
    internal const uint IORING_FEAT_SUBMIT_STABLE = 1u << 2;
    internal const uint IORING_FEAT_FAST_POLL = 1u << 5;
    internal const uint IORING_FEAT_EXT_ARG = 1u << 8;
    internal const uint IORING_FEAT_NATIVE_WORKERS = 1u << 9;
    internal const uint IORING_FEAT_CQE_SKIP = 1u << 11;
    internal const uint IORING_FEAT_REG_REG_RING = 1u << 13;
    internal const uint IORING_FEAT_RECVSEND_BUNDLE = 1u << 14;
    internal const uint IORING_FEAT_MIN_TIMEOUT = 1u << 15;
    internal const uint IORING_FEAT_NO_IOWAIT = 1u << 17;

    // io_uring_enter flags
    internal const uint IORING_ENTER_GETEVENTS = 1u << 0;
    internal const uint IORING_ENTER_SQ_WAKEUP = 1u << 1;
    internal const uint IORING_ENTER_SQ_WAIT = 1u << 2;
    internal const uint IORING_ENTER_EXT_ARG = 1u << 3;
    internal const uint IORING_ENTER_REGISTERED_RING = 1u << 4;
    internal const uint IORING_ENTER_NO_IOWAIT = 1u << 7; // 6.15+ (IORING_FEAT_NO_IOWAIT)

    // sq_ring flags
    internal const uint IORING_SQ_NEED_WAKEUP = 1u << 0;
    internal const uint IORING_SQ_CQ_OVERFLOW = 1u << 1;
    internal const uint IORING_SQ_TASKRUN = 1u << 2;

    // sqe->flags
    /// <summary>IOSQE_FIXED_FILE</summary>
    public const byte IOSQE_FIXED_FILE = 1 << 0;
    /// <summary>IOSQE_IO_DRAIN</summary>
    public const byte IOSQE_IO_DRAIN = 1 << 1;
    /// <summary>IOSQE_IO_LINK</summary>
    public const byte IOSQE_IO_LINK = 1 << 2;
    /// <summary>IOSQE_IO_HARDLINK</summary>
    public const byte IOSQE_IO_HARDLINK = 1 << 3;
    /// <summary>IOSQE_ASYNC</summary>
    public const byte IOSQE_ASYNC = 1 << 4;
    /// <summary>IOSQE_BUFFER_SELECT</summary>
    public const byte IOSQE_BUFFER_SELECT = 1 << 5;
    /// <summary>IOSQE_CQE_SKIP_SUCCESS</summary>
    public const byte IOSQE_CQE_SKIP_SUCCESS = 1 << 6;

    // cqe->flags
    /// <summary>IORING_CQE_F_BUFFER: the upper 16 bits hold the buffer id.</summary>
    public const uint IORING_CQE_F_BUFFER = 1u << 0;
    /// <summary>IORING_CQE_F_MORE: more CQEs follow for this request.</summary>
    public const uint IORING_CQE_F_MORE = 1u << 1;
    /// <summary>IORING_CQE_F_SOCK_NONEMPTY</summary>
    public const uint IORING_CQE_F_SOCK_NONEMPTY = 1u << 2;
    /// <summary>IORING_CQE_F_NOTIF: a zero-copy send's notification.</summary>
    public const uint IORING_CQE_F_NOTIF = 1u << 3;
    /// <summary>IORING_CQE_F_BUF_MORE</summary>
    public const uint IORING_CQE_F_BUF_MORE = 1u << 4;
    /// <summary>IORING_CQE_BUFFER_SHIFT</summary>
    public const int IORING_CQE_BUFFER_SHIFT = 16;

    // opcodes (enum io_uring_op)
    /// <summary>IORING_OP_NOP</summary>
    public const byte IORING_OP_NOP = 0;
    /// <summary>IORING_OP_READV</summary>
    public const byte IORING_OP_READV = 1;
    /// <summary>IORING_OP_WRITEV</summary>
    public const byte IORING_OP_WRITEV = 2;
    /// <summary>IORING_OP_READ_FIXED</summary>
    public const byte IORING_OP_READ_FIXED = 4;
    /// <summary>IORING_OP_POLL_ADD</summary>
    public const byte IORING_OP_POLL_ADD = 6;
    /// <summary>IORING_OP_POLL_REMOVE</summary>
    public const byte IORING_OP_POLL_REMOVE = 7;
    /// <summary>IORING_OP_SENDMSG</summary>
    public const byte IORING_OP_SENDMSG = 9;
    /// <summary>IORING_OP_RECVMSG</summary>
    public const byte IORING_OP_RECVMSG = 10;
    /// <summary>IORING_OP_TIMEOUT</summary>
    public const byte IORING_OP_TIMEOUT = 11;
    /// <summary>IORING_OP_TIMEOUT_REMOVE</summary>
    public const byte IORING_OP_TIMEOUT_REMOVE = 12;
    /// <summary>IORING_OP_ACCEPT</summary>
    public const byte IORING_OP_ACCEPT = 13;
    /// <summary>IORING_OP_ASYNC_CANCEL</summary>
    public const byte IORING_OP_ASYNC_CANCEL = 14;
    /// <summary>IORING_OP_LINK_TIMEOUT</summary>
    public const byte IORING_OP_LINK_TIMEOUT = 15;
    /// <summary>IORING_OP_CONNECT</summary>
    public const byte IORING_OP_CONNECT = 16;
    /// <summary>IORING_OP_CLOSE</summary>
    public const byte IORING_OP_CLOSE = 19;
    /// <summary>IORING_OP_READ</summary>
    public const byte IORING_OP_READ = 22;
    /// <summary>IORING_OP_WRITE</summary>
    public const byte IORING_OP_WRITE = 23;
    /// <summary>IORING_OP_SEND</summary>
    public const byte IORING_OP_SEND = 26;
    /// <summary>IORING_OP_RECV</summary>
    public const byte IORING_OP_RECV = 27;
    /// <summary>IORING_OP_SPLICE</summary>
    public const byte IORING_OP_SPLICE = 30;
    /// <summary>IORING_OP_PROVIDE_BUFFERS</summary>
    public const byte IORING_OP_PROVIDE_BUFFERS = 31;
    /// <summary>IORING_OP_REMOVE_BUFFERS</summary>
    public const byte IORING_OP_REMOVE_BUFFERS = 32;
    /// <summary>IORING_OP_SHUTDOWN</summary>
    public const byte IORING_OP_SHUTDOWN = 34;
    /// <summary>IORING_OP_MSG_RING</summary>
    public const byte IORING_OP_MSG_RING = 40;
    /// <summary>IORING_OP_SOCKET</summary>
    public const byte IORING_OP_SOCKET = 45;
    /// <summary>IORING_OP_SEND_ZC</summary>
    public const byte IORING_OP_SEND_ZC = 47;
    /// <summary>IORING_OP_SENDMSG_ZC</summary>
    public const byte IORING_OP_SENDMSG_ZC = 48;
    /// <summary>IORING_OP_READ_MULTISHOT</summary>
    public const byte IORING_OP_READ_MULTISHOT = 49;

    // sqe->ioprio for send/recv
    /// <summary>IORING_RECVSEND_POLL_FIRST</summary>
    public const ushort IORING_RECVSEND_POLL_FIRST = 1 << 0;
    /// <summary>IORING_RECV_MULTISHOT</summary>
    public const ushort IORING_RECV_MULTISHOT = 1 << 1;
    /// <summary>IORING_RECVSEND_FIXED_BUF</summary>
    public const ushort IORING_RECVSEND_FIXED_BUF = 1 << 2;
    /// <summary>IORING_SEND_ZC_REPORT_USAGE</summary>
    public const ushort IORING_SEND_ZC_REPORT_USAGE = 1 << 3;
    /// <summary>IORING_RECVSEND_BUNDLE</summary>
    public const ushort IORING_RECVSEND_BUNDLE = 1 << 4;
    /// <summary>IORING_NOTIF_USAGE_ZC_COPIED: in a NOTIF's res, the kernel copied the data.</summary>
    public const uint IORING_NOTIF_USAGE_ZC_COPIED = 1u << 31;

    // sqe->ioprio for accept
    /// <summary>IORING_ACCEPT_MULTISHOT</summary>
    public const ushort IORING_ACCEPT_MULTISHOT = 1 << 0;
    /// <summary>IORING_ACCEPT_DONTWAIT</summary>
    public const ushort IORING_ACCEPT_DONTWAIT = 1 << 1;
    /// <summary>IORING_ACCEPT_POLL_FIRST</summary>
    public const ushort IORING_ACCEPT_POLL_FIRST = 1 << 2;

    // sqe->cancel_flags
    /// <summary>IORING_ASYNC_CANCEL_ALL</summary>
    public const uint IORING_ASYNC_CANCEL_ALL = 1u << 0;
    /// <summary>IORING_ASYNC_CANCEL_FD</summary>
    public const uint IORING_ASYNC_CANCEL_FD = 1u << 1;
    /// <summary>IORING_ASYNC_CANCEL_ANY</summary>
    public const uint IORING_ASYNC_CANCEL_ANY = 1u << 2;
    /// <summary>IORING_ASYNC_CANCEL_FD_FIXED</summary>
    public const uint IORING_ASYNC_CANCEL_FD_FIXED = 1u << 3;
    /// <summary>IORING_ASYNC_CANCEL_USERDATA</summary>
    public const uint IORING_ASYNC_CANCEL_USERDATA = 1u << 4;
    /// <summary>IORING_ASYNC_CANCEL_OP</summary>
    public const uint IORING_ASYNC_CANCEL_OP = 1u << 5;

    // sqe->timeout_flags
    /// <summary>IORING_TIMEOUT_ABS</summary>
    public const uint IORING_TIMEOUT_ABS = 1u << 0;
    /// <summary>IORING_TIMEOUT_MULTISHOT</summary>
    public const uint IORING_TIMEOUT_MULTISHOT = 1u << 6;

    // sqe->nop_flags
    /// <summary>IORING_NOP_INJECT_RESULT: the NOP completes with sqe->len as its result.</summary>
    public const uint IORING_NOP_INJECT_RESULT = 1u << 0;

    internal const uint IORING_FILE_INDEX_ALLOC = 0xFFFFFFFF;

    // io_uring_register opcodes
    internal const uint IORING_REGISTER_EVENTFD = 4;
    internal const uint IORING_REGISTER_PROBE = 8;
    internal const uint IORING_REGISTER_ENABLE_RINGS = 12;
    internal const uint IORING_REGISTER_BUFFERS2 = 15;
    internal const uint IORING_REGISTER_BUFFERS_UPDATE = 16;
    internal const uint IORING_UNREGISTER_BUFFERS = 1;
    internal const uint IORING_RSRC_REGISTER_SPARSE = 1u << 0; // io_uring_rsrc_register.flags
    internal const uint IORING_REGISTER_RING_FDS = 20;
    internal const uint IORING_UNREGISTER_RING_FDS = 21;
    internal const uint IORING_REGISTER_PBUF_RING = 22;
    internal const uint IORING_UNREGISTER_PBUF_RING = 23;
    internal const uint IORING_REGISTER_SYNC_CANCEL = 24;
    internal const uint IORING_REGISTER_PBUF_STATUS = 26;
    internal const uint IORING_REGISTER_USE_REGISTERED_RING = 1u << 31;

    internal const ushort IO_URING_OP_SUPPORTED = 1 << 0; // io_uring_probe_op.flags

    internal const ushort IOU_PBUF_RING_MMAP = 1;
    internal const ushort IOU_PBUF_RING_INC = 2;

    // mmap offsets
    internal const long IORING_OFF_SQ_RING = 0;
    internal const long IORING_OFF_CQ_RING = 0x8000000;
    internal const long IORING_OFF_SQES = 0x10000000;
}
