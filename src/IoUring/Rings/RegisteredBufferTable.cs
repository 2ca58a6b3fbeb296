using System.Diagnostics;
using IoUring.Interop;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Rings;

/// <summary>
/// A ring's table of registered ("fixed") buffers: memory the kernel pinned once, so a request naming its index
/// (sqe->buf_index) skips pinning pages per send. Registered sparse on first use; entries are filled and emptied one
/// at a time.
/// </summary>
/// <remarks>
/// Ring thread only (SINGLE_ISSUER). A refusal (ENOMEM: RLIMIT_MEMLOCK; EPERM: seccomp) leaves the memory
/// unregistered.
/// </remarks>
internal sealed unsafe class RegisteredBufferTable
{
    /// <summary>With 256 KiB regions, 1 GiB of registered memory per ring.</summary>
    public const int Capacity = 4096;

    private readonly Ring _ring;
    private readonly int _injectedErrno;
    private readonly int _injectedUnregisterErrno;
    private ushort[]? _free;    // free entries, a stack; null until the sparse table is registered
    private int _freeCount;

    public RegisteredBufferTable(Ring ring, int injectedErrno = 0, int injectedUnregisterErrno = 0)
    {
        _ring = ring;
        _injectedErrno = injectedErrno;
        _injectedUnregisterErrno = injectedUnregisterErrno;
    }

    /// <summary>The last refusal's errno, or 0.</summary>
    public int RefusedErrno { get; private set; }

    public int Registered => _free is null ? 0 : Capacity - _freeCount;

    public long RegisteredBytes { get; private set; }

    /// <summary>False if the kernel refuses (see <see cref="RefusedErrno"/>) or the table is full.</summary>
    public bool TryRegister(byte* address, int length, out ushort index)
    {
        index = 0;
        if (_injectedErrno != 0)
        {
            RefusedErrno = _injectedErrno;
            return false;
        }
        if (_free is null && !TryRegisterTable())
        {
            return false;
        }
        if (_freeCount == 0)
        {
            return false; // full: the memory stays usable, unregistered
        }
        ushort entry = _free![_freeCount - 1];
        Debug.Assert(length > 0 && address != null, "registers empty memory");
        if (Update(entry, address, length) is int errno and < 0)
        {
            RefusedErrno = -errno;
            return false;
        }
        _freeCount--;
        RegisteredBytes += length;
        index = entry;
        return true;
    }

    /// <summary>Empties an entry no request references any more; false if the kernel refused (the entry stays
    /// taken).</summary>
    public bool TryUnregister(ushort index, int length)
    {
        Debug.Assert(_free is not null && _freeCount < Capacity && index < Capacity, "empties an entry never filled");
        // Cannot fail for a valid index on a live ring; if it did, leak the slot rather than reuse memory the kernel
        // still maps.
        int result = _injectedUnregisterErrno != 0 ? -_injectedUnregisterErrno : Update(index, null, 0);
        if (result < 0)
        {
            return false;
        }
        _free![_freeCount++] = index;
        RegisteredBytes -= length;
        return true;
    }

    private bool TryRegisterTable()
    {
        var register = new io_uring_rsrc_register { nr = Capacity, flags = IORING_RSRC_REGISTER_SPARSE };
        int result = _ring.TryRegister(IORING_REGISTER_BUFFERS2, &register, (uint)sizeof(io_uring_rsrc_register));
        if (result < 0)
        {
            RefusedErrno = -result;
            return false;
        }
        _free = new ushort[Capacity];
        for (int i = 0; i < Capacity; i++)
        {
            _free[i] = (ushort)(Capacity - 1 - i); // entry 0 on top
        }
        _freeCount = Capacity;
        return true;
    }

    private int Update(ushort entry, byte* address, int length)
    {
        var vector = new iovec { iov_base = (nuint)address, iov_len = (nuint)length };
        var update = new io_uring_rsrc_update2 { offset = entry, data = (ulong)&vector, nr = 1 };
        return _ring.TryRegister(IORING_REGISTER_BUFFERS_UPDATE, &update, (uint)sizeof(io_uring_rsrc_update2));
    }
}
