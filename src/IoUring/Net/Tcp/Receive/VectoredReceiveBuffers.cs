using System.Diagnostics;
using System.Runtime.InteropServices;
using IoUring.Buffers;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// <see cref="ConnectionReceiver"/>'s vectored RECVMSG: spare blocks and the msghdr pointing at them, made at first use
/// (only kernels without the receive cap need it). A mutable struct: never copied, never readonly.
/// </summary>
internal struct VectoredReceiveBuffers
{
    /// <summary>Spare blocks one RECVMSG fills (64 KiB of 8 KiB blocks).</summary>
    public const int MaxBlocks = 8;

    private unsafe Libc.msghdr* _message; // the msghdr, followed by MaxBlocks iovecs
    private ReceiveBlock[]? _blocks;
    private int[]? _lengths;

    /// <summary>Blocks the RECVMSG in flight holds (0: none in flight).</summary>
    public int InFlight { get; private set; }

    /// <summary>False (none kept) when the pool is out of memory.</summary>
    public bool TryRent(ReceiveBlockPool spares, int count)
    {
        Debug.Assert(InFlight == 0, "vectored blocks rented while a RECVMSG holds some");
        Debug.Assert(count is > 0 and <= MaxBlocks, "a vectored RECVMSG of more blocks than it has iovecs");
        _blocks ??= new ReceiveBlock[MaxBlocks];
        _lengths ??= new int[MaxBlocks];
        int rented = 0;
        try
        {
            for (; rented < count; rented++)
            {
                _blocks[rented] = spares.Rent();
            }
        }
        catch (OutOfMemoryException)
        {
            Return(spares, rented);
            return false;
        }
        return true;
    }

    /// <summary>The msghdr for the rented blocks, at most <paramref name="limit"/> bytes; they are in flight until
    /// <see cref="TakeInFlight"/>.</summary>
    public unsafe Libc.msghdr* Prepare(int count, int blockSize, long limit)
    {
        Debug.Assert(InFlight == 0, "a second vectored RECVMSG");
        if (_message == null)
        {
            _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + MaxBlocks * sizeof(iovec)));
        }
        var iovecs = (iovec*)(_message + 1);
        for (int i = 0; i < count; i++)
        {
            int length = (int)Math.Min(blockSize, limit);
            limit -= length;
            iovecs[i] = new iovec { iov_base = (nuint)_blocks![i].Address, iov_len = (nuint)length };
            _lengths![i] = length;
        }
        *_message = new Libc.msghdr { msg_iov = iovecs, msg_iovlen = (nuint)count };
        InFlight = count;
        return _message;
    }

    /// <summary>The RECVMSG completed: how many blocks it held; they are the caller's now.</summary>
    public int TakeInFlight()
    {
        Debug.Assert(InFlight > 0, "a vectored completion without a RECVMSG in flight");
        int count = InFlight;
        InFlight = 0;
        return count;
    }

    public readonly Span<ReceiveBlock> Blocks(int count) => _blocks.AsSpan(0, count);

    public readonly ReadOnlySpan<int> Lengths(int count) => _lengths.AsSpan(0, count);

    public readonly void Return(ReceiveBlockPool spares, int count)
    {
        for (int i = 0; i < count; i++)
        {
            spares.Return(_blocks![i]);
            _blocks[i] = default;
        }
    }

    /// <summary>Frees the msghdr: once nothing of the connection is in flight.</summary>
    public unsafe void FreeNativeMemory()
    {
        if (_message != null)
        {
            NativeMemory.Free(_message);
            _message = null;
        }
    }
}
