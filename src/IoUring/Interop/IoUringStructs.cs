using System.Runtime.InteropServices;

namespace IoUring.Interop;

// Blittable copies of the uapi structs in <linux/io_uring.h>, with the kernel's names and offsets.
// tests/IoUring.Tests/Abi checks every size and offset against the machine's header.
#pragma warning disable CA1707, CA1051, IDE1006, CS8981 // kernel names and public fields, as in the header

/// <summary>A submission queue entry (64 bytes); a union's members are fields at one offset.</summary>
[StructLayout(LayoutKind.Explicit, Size = 64)]
public struct io_uring_sqe
{
    /// <summary>IORING_OP_*.</summary>
    [FieldOffset(0)] public byte opcode;
    /// <summary>IOSQE_* flags.</summary>
    [FieldOffset(1)] public byte flags;
    /// <summary>ioprio, or an opcode's modifier bits (IORING_RECV_MULTISHOT, ...).</summary>
    [FieldOffset(2)] public ushort ioprio;
    /// <summary>The fd.</summary>
    [FieldOffset(4)] public int fd;
    /// <summary>File offset.</summary>
    [FieldOffset(8)] public ulong off;
    /// <summary>addr2.</summary>
    [FieldOffset(8)] public ulong addr2;
    /// <summary>Buffer or iovec array.</summary>
    [FieldOffset(16)] public ulong addr;
    /// <summary>splice_off_in.</summary>
    [FieldOffset(16)] public ulong splice_off_in;
    /// <summary>Buffer size or iovec count.</summary>
    [FieldOffset(24)] public uint len;
    /// <summary>rw_flags.</summary>
    [FieldOffset(28)] public int rw_flags;
    /// <summary>msg_flags.</summary>
    [FieldOffset(28)] public uint msg_flags;
    /// <summary>accept_flags.</summary>
    [FieldOffset(28)] public uint accept_flags;
    /// <summary>cancel_flags.</summary>
    [FieldOffset(28)] public uint cancel_flags;
    /// <summary>timeout_flags.</summary>
    [FieldOffset(28)] public uint timeout_flags;
    /// <summary>poll32_events.</summary>
    [FieldOffset(28)] public uint poll32_events;
    /// <summary>msg_ring_flags.</summary>
    [FieldOffset(28)] public uint msg_ring_flags;
    /// <summary>nop_flags.</summary>
    [FieldOffset(28)] public uint nop_flags;
    /// <summary>Returned in the CQE; the loop's for operations it submits.</summary>
    [FieldOffset(32)] public ulong user_data;
    /// <summary>Fixed buffer index.</summary>
    [FieldOffset(40)] public ushort buf_index;
    /// <summary>Provided buffer group.</summary>
    [FieldOffset(40)] public ushort buf_group;
    /// <summary>personality.</summary>
    [FieldOffset(42)] public ushort personality;
    /// <summary>splice_fd_in.</summary>
    [FieldOffset(44)] public int splice_fd_in;
    /// <summary>file_index.</summary>
    [FieldOffset(44)] public uint file_index;
    /// <summary>optlen.</summary>
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
    public ulong user_data;
    public int res;
    public uint flags;
}

/// <summary>The header a multishot RECVMSG writes at the start of each buffer, followed by the source address
/// (msg_namelen bytes reserved), the control data (msg_controllen bytes reserved) and the payload.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_recvmsg_out
{
    /// <summary>The address's real length: above msg_namelen, it was cut.</summary>
    public uint namelen;
    public uint controllen;
    /// <summary>The datagram's full length when the SQE passed MSG_TRUNC.</summary>
    public uint payloadlen;
    public uint flags;
}

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
    public ushort resv;
}

[StructLayout(LayoutKind.Sequential)]
internal unsafe struct io_uring_buf_reg
{
    public ulong ring_addr;
    public uint ring_entries;
    public ushort bgid;
    public ushort flags;
    public uint min_left;
    public fixed uint resv[5];
}

[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_rsrc_update
{
    public uint offset;
    public uint resv;
    public ulong data;
}

[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_rsrc_register
{
    public uint nr;
    public uint flags;
    public ulong resv2;
    public ulong data;
    public ulong tags;
}

/// <summary>Argument of IORING_REGISTER_BUFFERS_UPDATE; an iovec of 0/0 empties an entry.</summary>
[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_rsrc_update2
{
    public uint offset;
    public uint resv;
    public ulong data;
    public ulong tags;
    public uint nr;
    public uint resv2;
}

[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_getevents_arg
{
    public ulong sigmask;
    public uint sigmask_sz;
    public uint min_wait_usec;
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

/// <summary>Header of the IORING_REGISTER_PROBE result; the ops follow it.</summary>
[StructLayout(LayoutKind.Sequential)]
internal unsafe struct io_uring_probe
{
    public byte last_op;
    public byte ops_len;
    public ushort resv;
    public fixed uint resv2[3];
}

[StructLayout(LayoutKind.Sequential)]
internal struct io_uring_probe_op
{
    public byte op;
    public byte resv;
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
