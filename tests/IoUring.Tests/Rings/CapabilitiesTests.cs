using System.Net;
using System.Net.Sockets;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Rings;

public sealed class CapabilitiesTests
{
    [Fact]
    public void This_kernel_supports_everything_the_library_requires()
    {
        IoUringCapabilities caps = IoUringCapabilities.Current;
        Assert.True(caps.IsSupported, caps.UnavailableReason);
        caps.EnsureSupported();
        Assert.True(caps.HasBufferRing);
        Assert.True(caps.HasRegisteredRingFd);
        Assert.True(caps.HasDeferTaskRun);
        Assert.True(caps.OpcodeCount > IORING_OP_SEND_ZC);
        foreach (byte op in new[] { IORING_OP_NOP, IORING_OP_ACCEPT, IORING_OP_RECV, IORING_OP_SEND, IORING_OP_SENDMSG, IORING_OP_CONNECT, IORING_OP_CLOSE, IORING_OP_SHUTDOWN, IORING_OP_ASYNC_CANCEL, IORING_OP_SEND_ZC })
        {
            Assert.True(caps.IsOpcodeSupported(op), $"opcode {op} not reported");
        }
        Assert.False(caps.IsOpcodeSupported(255));
    }

    [Fact]
    public void Zero_copy_features_are_probed_as_this_kernel_has_them()
    {
        // SENDMSG_ZC came in 6.1 and SEND_ZC_REPORT_USAGE (a flag, which the opcode probe cannot see) in 6.2; long-term
        // kernels may have them earlier (Debian's 6.1.192 has REPORT_USAGE), so the version is only a lower bound and the
        // flag is checked against a real send.
        IoUringCapabilities caps = IoUringCapabilities.Current;
        Version kernel = Environment.OSVersion.Version;
        Assert.True(caps.HasZeroCopySend);
        Assert.True(kernel < new Version(6, 1) || caps.HasZeroCopySendMsg);
        Assert.True(kernel < new Version(6, 2) || caps.HasZeroCopyReportUsage);
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        Assert.Equal(RealSendAcceptsFlag(ring, IORING_SEND_ZC_REPORT_USAGE), caps.HasZeroCopyReportUsage);
    }

    [Fact]
    public void The_flag_probe_tells_a_known_zero_copy_flag_from_an_unknown_one()
    {
        // What the REPORT_USAGE probe relies on: flags are checked before the fd (EINVAL), the fd at issue (EBADF). Its
        // answer must be what a real zero-copy send on a connected socket says about the same flag.
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        Assert.False(IoUringCapabilities.ProbeZeroCopyFlag(ring, 1 << 15)); // no such flag on any kernel
        Assert.False(RealSendAcceptsFlag(ring, 1 << 15));
        Assert.Equal(RealSendAcceptsFlag(ring, IORING_SEND_ZC_REPORT_USAGE), IoUringCapabilities.ProbeZeroCopyFlag(ring, IORING_SEND_ZC_REPORT_USAGE));
        Assert.True(IoUringCapabilities.ProbeZeroCopyFlag(ring, IORING_RECVSEND_POLL_FIRST)); // a 6.0 flag
    }

    /// <summary>Sends one byte with SEND_ZC and <paramref name="flag"/> over a loopback TCP connection: false if the kernel refuses the flag (EINVAL).</summary>
    private static unsafe bool RealSendAcceptsFlag(Ring ring, ushort flag)
    {
        using var listener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        listener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        listener.Listen();
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        client.Connect(listener.LocalEndPoint!);
        using Socket server = listener.Accept();
        byte* payload = stackalloc byte[1];
        io_uring_sqe* sqe = ring.TryGetSqe();
        sqe->opcode = IORING_OP_SEND_ZC;
        sqe->fd = (int)client.Handle;
        sqe->ioprio = flag;
        sqe->addr = (ulong)payload;
        sqe->len = 1;
        int result = 0;
        bool final = false;
        while (!final)
        {
            // The send's result, then (F_MORE) its notification once the receiver took the byte.
            ring.SubmitAndWait(1);
            uint ready = ring.ReadyCompletions(out uint head);
            for (uint i = 0; i < ready; i++)
            {
                io_uring_cqe* cqe = ring.CqeAt(head + i);
                if ((cqe->flags & IORING_CQE_F_NOTIF) == 0)
                {
                    result = cqe->res;
                    if (result == 1)
                    {
                        Assert.Equal(1, server.Receive(new byte[1]));
                    }
                }
                final |= (cqe->flags & IORING_CQE_F_MORE) == 0;
            }
            ring.AdvanceCq(ready);
        }
        Assert.True(result is 1 or -Errno.EINVAL, $"SEND_ZC result {result}");
        return result == 1;
    }

    [Fact]
    public unsafe void The_receive_limit_probe_agrees_with_a_real_capped_multishot_receive()
    {
        // 100 bytes wait in a socket; a multishot RECV capped at 40 bytes takes 16-byte buffers. With the cap it ends by
        // itself (no F_MORE) after the buffer that reaches 40 (48 bytes) and leaves the rest in the socket; a kernel
        // without it refuses the RECV (EINVAL).
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        using var buffers = new BufferRing(ring, groupId: 7, count: 16, bufferSize: 16);
        buffers.Fill();
        (int reader, int writer) = SocketPairs.Create();
        try
        {
            Write(writer, new byte[100]);
            List<io_uring_cqe> cqes = Receive(ring, reader, group: 7, IORING_RECV_MULTISHOT, optlen: 40);
            int received = cqes.Where(c => c.res > 0).Sum(c => c.res);
            int error = cqes.Where(c => c.res <= 0).Select(c => c.res).LastOrDefault();
            bool capped = error == 0;
            Assert.True(capped || error == -Errno.EINVAL, $"RECV result {error}");
            Assert.Equal(capped, IoUringCapabilities.ProbeReceiveLimit(ring));
            Assert.Equal(capped, IoUringCapabilities.Current.HasReceiveLimit);
            if (capped)
            {
                Assert.Equal(48, received);
                Assert.Equal(52, SocketPairs.Queued(reader));
            }
        }
        finally
        {
            Libc.close(reader);
            Libc.close(writer);
        }
    }

    [Fact]
    public unsafe void Where_bundles_are_used_a_real_bundle_receive_fills_several_buffers_found_in_ring_order()
    {
        // 100 bytes wait; a RECV with IORING_RECVSEND_BUNDLE over 16-byte buffers takes several consecutive ring entries in
        // one completion (the first buffer named in the CQE, the rest found by ring position); without bundles, one buffer.
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        using var buffers = new BufferRing(ring, groupId: 9, count: 16, bufferSize: 16);
        buffers.Fill();
        (int reader, int writer) = SocketPairs.Create();
        try
        {
            byte[] payload = Enumerable.Range(0, 100).Select(i => (byte)i).ToArray();
            Write(writer, payload);
            io_uring_cqe cqe = Assert.Single(Receive(ring, reader, group: 9, IORING_RECVSEND_BUNDLE, optlen: 0));
            bool bundled = cqe.res > 16;
            Assert.True(bundled || cqe.res is 16 or -Errno.EINVAL, $"RECV result {cqe.res}");
            // Where bundles are used the kernel bundles; a kernel may also bundle where they are not used (6.10-6.14,
            // see HasReceiveBundles), and a first receive may take one buffer only (6.12 did here).
            Assert.True(bundled || !IoUringCapabilities.Current.HasReceiveBundles, "HasReceiveBundles, but the kernel filled one buffer");
            if (bundled)
            {
                ushort first = (ushort)(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
                uint position = buffers.PositionOf(first);
                var received = new List<byte>();
                foreach (ReadOnlySpan<byte> bytes in new ReceivedBytes(buffers, position, cqe.res))
                {
                    received.AddRange(bytes.ToArray());
                }
                Assert.Equal(payload.Take(cqe.res), received);
                Assert.True(buffers.TryGetEntryAt(position, out ushort firstAgain, out _));
                Assert.Equal(first, firstAgain);
                // Once an entry's slot is written again, its old buffer is no longer claimed there.
                for (int i = 0; i < 16; i++)
                {
                    buffers.Recycle(first);
                }
                Assert.False(buffers.TryGetEntryAt(position + 1, out _, out _));
            }
        }
        finally
        {
            Libc.close(reader);
            Libc.close(writer);
        }
    }

    [Fact]
    public unsafe void A_bundle_capped_below_a_buffer_is_read_by_its_entry_length()
    {
        // A bundle RECV whose byte cap (5) is below a buffer's size (16). Some kernels shorten the head entry to 5 bytes in
        // the shared ring while preparing such a bundle (io_ring_buffers_peek writes buf->len); if that receive then took
        // nothing, the short entry would stay for a later bundle, whose buffers would then not all be full but the last.
        // So a bundle's buffers are walked by their entries' lengths, never assumed full. 6.18 here leaves the entry at
        // 16 (so the stale-entry case cannot be produced on this machine); either way the walk must give the 5 bytes.
        if (!IoUringCapabilities.Current.HasReceiveBundles || !IoUringCapabilities.Current.HasReceiveLimit)
        {
            return; // nothing to hold to on a kernel without bundles or the cap
        }
        using Ring ring = Ring.Create(new RingOptions { SqEntries = 8 });
        using var buffers = new BufferRing(ring, groupId: 10, count: 16, bufferSize: 16);
        buffers.Fill();
        (int reader, int writer) = SocketPairs.Create();
        try
        {
            byte[] payload = Enumerable.Range(0, 100).Select(i => (byte)i).ToArray();
            Write(writer, payload);
            io_uring_cqe cqe = Receive(ring, reader, group: 10, (ushort)(IORING_RECVSEND_BUNDLE | IORING_RECV_MULTISHOT), optlen: 5)[^1];
            Assert.Equal(5, cqe.res);
            ushort bid = (ushort)(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
            uint position = buffers.PositionOf(bid);
            Assert.True(buffers.TryGetEntryAt(position, out ushort entryBid, out int entryLength));
            Assert.Equal(bid, entryBid);
            Assert.True(entryLength is 5 or 16, $"entry length {entryLength}"); // shortened by the kernel, or not
            var received = new List<byte>();
            foreach (ReadOnlySpan<byte> bytes in new ReceivedBytes(buffers, position, cqe.res))
            {
                received.AddRange(bytes.ToArray());
            }
            Assert.Equal(payload.Take(5), received);
            buffers.Recycle(bid);
            Assert.True(buffers.TryGetEntryAt(buffers.PositionOf(bid), out _, out int restored));
            Assert.Equal(16, restored); // handed back at full length
        }
        finally
        {
            Libc.close(reader);
            Libc.close(writer);
        }
    }

    private static unsafe void Write(int fd, byte[] payload)
    {
        fixed (byte* p = payload)
        {
            Assert.Equal(payload.Length, (int)Libc.write(fd, p, (nuint)payload.Length));
        }
    }

    /// <summary>Submits a RECV selecting from buffer group <paramref name="group"/> and returns its CQEs up to the final one.</summary>
    private static unsafe List<io_uring_cqe> Receive(Ring ring, int fd, ushort group, ushort ioprio, uint optlen)
    {
        io_uring_sqe* sqe = ring.TryGetSqe();
        sqe->opcode = IORING_OP_RECV;
        sqe->fd = fd;
        sqe->ioprio = ioprio;
        sqe->flags = IOSQE_BUFFER_SELECT;
        sqe->buf_group = group;
        sqe->optlen = optlen;
        var cqes = new List<io_uring_cqe>();
        bool final = false;
        while (!final)
        {
            ring.SubmitAndWait(1);
            uint ready = ring.ReadyCompletions(out uint head);
            for (uint i = 0; i < ready; i++)
            {
                io_uring_cqe* cqe = ring.CqeAt(head + i);
                cqes.Add(*cqe);
                final |= (cqe->flags & IORING_CQE_F_MORE) == 0;
            }
            ring.AdvanceCq(ready);
        }
        return cqes;
    }
}
