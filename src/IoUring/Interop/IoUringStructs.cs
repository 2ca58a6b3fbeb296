using System.Runtime.InteropServices;

namespace IoUring.Interop;

// Blittable copies of the uapi structs in <linux/io_uring.h>, with the kernel's names and offsets.
// tests/IoUring.Tests/Abi checks every size and offset against the machine's header.
#pragma warning disable CA1707, CA1051, IDE1006, CS8981 // kernel names and public fields, as in the header

/// <summary>A submission queue entry (64 bytes). Unions are overlapping fields with the kernel's member
/// names.</summary>
[StructLayout(LayoutKind.Explicit, Size = 64)]
public struct io_uring_sqe
{
    /// <summary>Type of operation (IORING_OP_*).</summary>
    [FieldOffset(0)] public byte opcode;
    /// <summary>IOSQE_* flags.</summary>
    [FieldOffset(1)] public byte flags;
    /// <summary>ioprio, or an opcode's modifier bits (IORING_RECV_MULTISHOT, IORING_ACCEPT_MULTISHOT, ...).</summary>
    [FieldOffset(2)] public ushort ioprio;
    /// <summary>File descriptor to do I/O on.</summary>
    [FieldOffset(4)] public int fd;
    /// <summary>Offset into file.</summary>
    [FieldOffset(8)] public ulong off;
    /// <summary>Second address (union with off).</summary>
    [FieldOffset(8)] public ulong addr2;
    /// <summary>Pointer to buffer or iovecs.</summary>
    [FieldOffset(16)] public ulong addr;
    /// <summary>splice_off_in (union with addr).</summary>
    [FieldOffset(16)] public ulong splice_off_in;
    /// <summary>Buffer size or number of iovecs.</summary>
    [FieldOffset(24)] public uint len;
    /// <summary>Opcode flags union: rw_flags.</summary>
    [FieldOffset(28)] public int rw_flags;
    /// <summary>Opcode flags union: msg_flags.</summary>
    [FieldOffset(28)] public uint msg_flags;
    /// <summary>Opcode flags union: accept_flags.</summary>
    [FieldOffset(28)] public uint accept_flags;
    /// <summary>Opcode flags union: cancel_flags.</summary>
    [FieldOffset(28)] public uint cancel_flags;
    /// <summary>Opcode flags union: timeout_flags.</summary>
    [FieldOffset(28)] public uint timeout_flags;
    /// <summary>Opcode flags union: poll32_events.</summary>
    [FieldOffset(28)] public uint poll32_events;
    /// <summary>Opcode flags union: msg_ring_flags.</summary>
    [FieldOffset(28)] public uint msg_ring_flags;
    /// <summary>Opcode flags union: nop_flags.</summary>
    [FieldOffset(28)] public uint nop_flags;
    /// <summary>Data passed back at completion time. Owned by the loop for operations it submits.</summary>
    [FieldOffset(32)] public ulong user_data;
    /// <summary>Index into fixed buffers, if used.</summary>
    [FieldOffset(40)] public ushort buf_index;
    /// <summary>For grouped buffer selection (union with buf_index).</summary>
    [FieldOffset(40)] public ushort buf_group;
    /// <summary>Personality to use, if used.</summary>
    [FieldOffset(42)] public ushort personality;
    /// <summary>splice_fd_in.</summary>
    [FieldOffset(44)] public int splice_fd_in;
    /// <summary>file_index (union with splice_fd_in).</summary>
    [FieldOffset(44)] public uint file_index;
    /// <summary>optlen (union with splice_fd_in).</summary>
    [FieldOffset(44)] public uint optlen;
    /// <summary>addr3.</summary>
    [FieldOffset(48)] public ulong addr3;
    /// <summary>__pad2[0].</summary>
    [FieldOffset(56)] public ulong __pad2;
}

/// <summary>A completion queue entry (16 bytes).</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_cqe
{
    /// <summary>sqe->user_data value passed back.</summary>
    public ulong user_data;
    /// <summary>Result code for this event (negative errno on failure).</summary>
    public int res;
    /// <summary>IORING_CQE_F_* flags; the upper 16 bits carry a selected buffer id.</summary>
    public uint flags;
}

/// <summary>
/// The header a multishot RECVMSG writes at the start of each selected buffer (16 bytes), followed by the source
/// address (msghdr.msg_namelen bytes reserved, whatever its real length), the control data (msg_controllen bytes
/// reserved), then the payload.
/// </summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_recvmsg_out
{
    /// <summary>The source address's real length (may exceed the room reserved for it: then it was cut).</summary>
    public uint namelen;
    /// <summary>The control data's length.</summary>
    public uint controllen;
    /// <summary>The datagram's length (its full length when MSG_TRUNC was passed in the SQE's msg_flags).</summary>
    public uint payloadlen;
    /// <summary>The message flags (MSG_TRUNC: the payload did not fit in the buffer).</summary>
    public uint flags;
}

/// <summary>Offsets of the SQ ring's fields inside its mapping.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_sqring_offsets
{
    public uint head;
    public uint tail;
    public uint ring_mask;
    public uint ring_entries;
    public uint flags;
    public uint dropped;
    public uint array;
    public uint resv1;
    public ulong user_addr;
}

/// <summary>Offsets of the CQ ring's fields inside its mapping.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_cqring_offsets
{
    public uint head;
    public uint tail;
    public uint ring_mask;
    public uint ring_entries;
    public uint overflow;
    public uint cqes;
    public uint flags;
    public uint resv1;
    public ulong user_addr;
}

/// <summary>Passed to io_uring_setup; the kernel fills in sizes, features and offsets.</summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct io_uring_params
{
    public uint sq_entries;
    public uint cq_entries;
    public uint flags;
    public uint sq_thread_cpu;
    public uint sq_thread_idle;
    public uint features;
    public uint wq_fd;
    /// <summary>resv[3]</summary>
    public fixed uint resv[3];
    public io_sqring_offsets sq_off;
    public io_cqring_offsets cq_off;
}

/// <summary>One entry of a provided buffer ring (16 bytes). Entry 0's resv aliases the ring's tail.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_buf
{
    public ulong addr;
    public uint len;
    public ushort bid;
    /// <summary>resv (the ring tail in entry 0)</summary>
    public ushort resv;
}

/// <summary>Argument of IORING_REGISTER_PBUF_RING.</summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct io_uring_buf_reg
{
    public ulong ring_addr;
    public uint ring_entries;
    public ushort bgid;
    public ushort flags;
    /// <summary>min_left (newer kernels; reserved and zero before)</summary>
    public uint min_left;
    /// <summary>resv</summary>
    public fixed uint resv[5];
}

/// <summary>Argument of IORING_REGISTER_RING_FDS and friends.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_rsrc_update
{
    public uint offset;
    public uint resv;
    public ulong data;
}

/// <summary>Argument of IORING_REGISTER_BUFFERS2 (a resource table, sparse or filled).</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_rsrc_register
{
    /// <summary>nr: table entries</summary>
    public uint nr;
    /// <summary>flags (IORING_RSRC_REGISTER_SPARSE)</summary>
    public uint flags;
    public ulong resv2;
    /// <summary>data (an iovec array, or 0 for a sparse table)</summary>
    public ulong data;
    /// <summary>tags (a u64 array, or 0)</summary>
    public ulong tags;
}

/// <summary>Argument of IORING_REGISTER_BUFFERS_UPDATE: replaces <see cref="nr"/> table entries from
/// <see cref="offset"/>.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_rsrc_update2
{
    /// <summary>offset: the first table entry</summary>
    public uint offset;
    public uint resv;
    /// <summary>data (an iovec array; an iovec of 0/0 empties the entry)</summary>
    public ulong data;
    /// <summary>tags (a u64 array, or 0)</summary>
    public ulong tags;
    public uint nr;
    public uint resv2;
}

/// <summary>Argument of io_uring_enter with IORING_ENTER_EXT_ARG.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_getevents_arg
{
    public ulong sigmask;
    public uint sigmask_sz;
    public uint min_wait_usec;
    /// <summary>ts (a __kernel_timespec pointer)</summary>
    public ulong ts;
}

/// <summary>struct __kernel_timespec.</summary>
[StructLayout(LayoutKind.Sequential)]
public struct __kernel_timespec
{
    /// <summary>tv_sec</summary>
    public long tv_sec;
    /// <summary>tv_nsec</summary>
    public long tv_nsec;
}

/// <summary>Header of the IORING_REGISTER_PROBE result; <see cref="io_uring_probe_op"/> entries follow it.</summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct io_uring_probe
{
    /// <summary>Last opcode supported.</summary>
    public byte last_op;
    /// <summary>Length of ops[] array below.</summary>
    public byte ops_len;
    public ushort resv;
    /// <summary>resv2[3]</summary>
    public fixed uint resv2[3];
}

/// <summary>One opcode's entry in an <see cref="io_uring_probe"/>.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_probe_op
{
    public byte op;
    public byte resv;
    /// <summary>IO_URING_OP_* flags</summary>
    public ushort flags;
    public uint resv2;
}

/// <summary>struct iovec.</summary>
[StructLayout(LayoutKind.Sequential)]
public struct iovec
{
    /// <summary>iov_base</summary>
    public nuint iov_base;
    /// <summary>iov_len</summary>
    public nuint iov_len;
}
