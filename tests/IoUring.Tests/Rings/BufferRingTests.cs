using System.Text;
using IoUring.Interop;
using IoUring.Rings;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Rings;

/// <summary>Provide, consume and recycle buffers through real RECVs with buffer select on a socketpair.</summary>
public sealed unsafe class BufferRingTests : IDisposable
{
    private readonly Ring _ring = Ring.Create(new RingOptions { SqEntries = 16 });
    private readonly int _reader;
    private readonly int _writer;

    public BufferRingTests()
    {
        int* fds = stackalloc int[2];
        Assert.Equal(0, Libc.socketpair(Libc.AF_UNIX, Libc.SOCK_STREAM | Libc.SOCK_CLOEXEC, 0, fds));
        (_reader, _writer) = (fds[0], fds[1]);
    }

    public void Dispose()
    {
        Libc.close(_reader);
        Libc.close(_writer);
        _ring.Dispose();
    }

    private void Send(string text)
    {
        byte[] bytes = Encoding.ASCII.GetBytes(text);
        fixed (byte* p = bytes)
        {
            Assert.Equal(bytes.Length, (int)Libc.write(_writer, p, (nuint)bytes.Length));
        }
    }

    private io_uring_cqe Recv(ushort group)
    {
        io_uring_sqe* sqe = _ring.TryGetSqe();
        sqe->opcode = IORING_OP_RECV;
        sqe->fd = _reader;
        sqe->flags = IOSQE_BUFFER_SELECT;
        sqe->buf_group = group;
        sqe->user_data = 1;
        _ring.SubmitAndWait(1);
        uint ready = _ring.ReadyCompletions(out uint head);
        Assert.Equal(1u, ready);
        io_uring_cqe cqe = *_ring.CqeAt(head);
        _ring.AdvanceCq(1);
        return cqe;
    }

    [Fact]
    public void Receives_consume_buffers_and_recycled_buffers_are_used_again()
    {
        using var buffers = new BufferRing(_ring, groupId: 3, count: 4, bufferSize: 64);
        buffers.Fill();
        var bidsSeen = new HashSet<ushort>();
        for (int i = 0; i < 20; i++)
        {
            string message = $"message {i}";
            Send(message);
            io_uring_cqe cqe = Recv(3);
            Assert.Equal(message.Length, cqe.res);
            Assert.NotEqual(0u, cqe.flags & IORING_CQE_F_BUFFER);
            ushort bid = (ushort)(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
            bidsSeen.Add(bid);
            Assert.Equal(message, Encoding.ASCII.GetString(buffers.GetBuffer(bid, cqe.res)));
            buffers.Recycle(bid);
            buffers.Publish();
        }
        // 20 receives through a 4-entry ring only work if recycling works; all four buffers took turns.
        Assert.Equal(4, bidsSeen.Count);
    }

    [Fact]
    public void An_empty_ring_fails_with_ENOBUFS_and_loses_no_byte_after_a_refill()
    {
        using var buffers = new BufferRing(_ring, groupId: 4, count: 2, bufferSize: 64);
        buffers.Fill();
        var held = new List<ushort>();
        for (int i = 0; i < 2; i++)
        {
            Send("x" + i);
            held.Add((ushort)(Recv(4).flags >> IORING_CQE_BUFFER_SHIFT));
        }
        Send("kept");
        Assert.Equal(-Errno.ENOBUFS, Recv(4).res);

        foreach (ushort bid in held)
        {
            buffers.Recycle(bid);
        }
        Assert.Equal(2, buffers.UnpublishedCount);
        buffers.Publish();
        io_uring_cqe cqe = Recv(4);
        Assert.Equal("kept", Encoding.ASCII.GetString(buffers.GetBuffer((ushort)(cqe.flags >> IORING_CQE_BUFFER_SHIFT), cqe.res)));
    }

    [Fact]
    public void The_entry_ring_and_the_buffers_are_aligned_to_the_systems_page_size()
    {
        // On a 4 KiB-page machine this passed with the old hard-coded 4096 too; it guards 16/64 KiB-page kernels.
        using var buffers = new BufferRing(_ring, groupId: 5, count: 4, bufferSize: 64);
        buffers.Fill();
        nuint page = (nuint)Environment.SystemPageSize;
        Assert.Equal(0u, buffers.RingAddress % page);
        fixed (byte* first = buffers.GetBuffer(0, 1))
        {
            Assert.Equal(0u, (nuint)first % page);
        }
    }

    [Fact]
    public void Invalid_sizes_are_rejected_with_the_parameter_named()
    {
        var ex = Assert.Throws<ArgumentOutOfRangeException>(() => new BufferRing(_ring, 5, count: 3, bufferSize: 64));
        Assert.Equal("count", ex.ParamName);
    }
}
