using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Testing;
using IoUring.Tests.Net;
using IoUring.Tests.Support;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Tests.Buffers;

/// <summary>
/// Each loop's memory pool, registered with its ring as fixed buffers, and the zero-copy sends that name those buffers.
/// Loopback always copies (the kernel says so and a connection goes back to plain sends), so these tests force
/// zero-copy on (<see cref="TestHooks.IgnoreZeroCopyCopied"/>) to exercise every lifetime: the pool poisons returned
/// blocks, so a block reused while the kernel still read it would show up as wrong bytes at the client.
/// </summary>
public sealed class RegisteredMemoryTests
{
    private static IoUringNetworkOptions ForcedZeroCopy(TestHooks? hooks = null) => new()
    {
        LoopCount = 1,
        ZeroCopySendThreshold = 16 * 1024,
        Loop =
        {
            Hooks = new()
            {
                IgnoreZeroCopyCopied = true,
                PoisonReturnedMemory = true,
                BufferRegistrationErrno = hooks?.BufferRegistrationErrno ?? 0,
                Capabilities = hooks?.Capabilities,
            },
        },
    };

    private static Task<T> OnLoopAsync<T>(EventLoop loop, Func<T> action)
    {
        var done = new TaskCompletionSource<T>(TaskCreationOptions.RunContinuationsAsynchronously);
        loop.Schedule(_ =>
        {
            try
            {
                done.SetResult(action());
            }
            catch (Exception ex)
            {
                done.SetException(ex);
            }
        }, null);
        return done.Task;
    }

    [Fact]
    public async Task A_loops_pool_registers_its_regions_with_the_ring_and_trimming_unregisters_them()
    {
        using var loop = new EventLoop();
        IMemoryOwner<byte> block = loop.MemoryPool.Rent();
        await Eventually.WaitForAsync(() => OnLoopAsync(loop, () => loop.TryGetRegisteredBuffer(block.Memory, out _)).Result);
        (bool registered, ushort index) = await OnLoopAsync(loop, () => (loop.TryGetRegisteredBuffer(block.Memory[100..], out ushort i), i));
        Assert.True(registered);
        Assert.Equal(1, await OnLoopAsync(loop, () => loop.BufferTable!.Registered));
        Assert.False(await OnLoopAsync(loop, () => loop.TryGetRegisteredBuffer(new byte[16], out _))); // not the pool's memory
        Assert.Throws<InvalidOperationException>(() => loop.TryGetRegisteredBuffer(block.Memory, out _)); // loop thread only

        PinnedRegion region = PinnedBlockMemoryPool.BlockOf(block).Region;
        block.Memory.Span.Fill(1);
        block.Dispose();
        PinnedBlockMemoryPool pool = loop.MemoryPoolIfCreated!;
        Assert.Equal(0, pool.Trim()); // rented during this interval
        Assert.NotEqual(0, MemoryPoolTests.ResidentPages(region));
        Assert.Equal(pool.BlocksPerRegion, pool.Trim());
        await Eventually.WaitForAsync(() => OnLoopAsync(loop, () => loop.BufferTable!.Registered).Result == 0);
        Assert.Equal(0, await OnLoopAsync(loop, () => loop.BufferTable!.RegisteredBytes));
        // Released on the loop once unregistered (never while the ring's table still held them).
        await Eventually.WaitForAsync(() => OnLoopAsync(loop, () => MemoryPoolTests.ResidentPages(region)).Result == 0);
        Assert.Equal(0, await OnLoopAsync(loop, () => MemoryPoolTests.ResidentPages(region)));
        _ = index;
    }

    /// <summary>A block of <paramref name="loop"/>'s pool whose region the ring has registered.</summary>
    private static async Task<PinnedRegion> RegisteredRegionAsync(EventLoop loop)
    {
        IMemoryOwner<byte> block = loop.MemoryPool.Rent();
        await Eventually.WaitForAsync(() => OnLoopAsync(loop, () => loop.TryGetRegisteredBuffer(block.Memory, out _)).Result);
        Assert.True(await OnLoopAsync(loop, () => loop.TryGetRegisteredBuffer(block.Memory, out _)));
        block.Memory.Span.Fill(1);
        block.Dispose();
        return PinnedBlockMemoryPool.BlockOf(block).Region;
    }

    private static int RegionPages => PinnedBlockMemoryPool.RegionSize / Environment.SystemPageSize;

    [Fact]
    public async Task A_trimmed_region_whose_entry_the_kernel_did_not_empty_keeps_its_pages_and_stays_counted()
    {
        // The ring's table still holds the pages (pinned, charged to RLIMIT_MEMLOCK): given back with madvise, RSS
        // would say they are free while the kernel keeps them.
        using var loop = new EventLoop(new EventLoopOptions { Hooks = new() { BufferUnregistrationErrno = Errno.EBUSY } });
        PinnedRegion region = await RegisteredRegionAsync(loop);
        PinnedBlockMemoryPool pool = loop.MemoryPoolIfCreated!;
        Assert.Equal(0, pool.Trim()); // rented during this interval
        Assert.Equal(pool.BlocksPerRegion, pool.Trim());

        // Posted after the unregister the trim posted, so it runs after it.
        Assert.Equal(RegionPages, await OnLoopAsync(loop, () => MemoryPoolTests.ResidentPages(region)));
        Assert.Equal(1, await OnLoopAsync(loop, () => loop.BufferTable!.Registered));
        Assert.Equal(PinnedBlockMemoryPool.RegionSize, loop.Counters.RegisteredMemoryBytes);
    }

    [Fact]
    public async Task A_region_trimmed_as_the_loop_stops_keeps_its_pages()
    {
        // Stopping, the loop leaves the entry to the ring's close: until then the kernel holds the pages.
        var loop = new EventLoop();
        PinnedRegion region = await RegisteredRegionAsync(loop);
        PinnedBlockMemoryPool pool = loop.MemoryPoolIfCreated!;
        Assert.Equal(0, pool.Trim()); // rented during this interval
        int trimmed = 0;
        loop.Stopping += () => trimmed = pool.Trim(); // on the loop thread, the stop begun
        loop.Dispose();
        Assert.Equal(pool.BlocksPerRegion, trimmed);
        Assert.Equal(RegionPages, MemoryPoolTests.ResidentPages(region));
    }

    [Fact]
    public void Disposing_a_loops_pool_from_outside_does_not_end_it_and_a_stopped_loops_pool_still_rents()
    {
        var loop = new EventLoop();
        IMemoryOwner<byte> first = loop.MemoryPool.Rent();
        loop.MemoryPool.Dispose(); // a user (or a DI container) disposing what a public property handed out
        first.Dispose();
        PinnedBlockMemoryPool pool = loop.MemoryPoolIfCreated!;
        Assert.Equal(1, pool.RetainedBlocks > 0 ? 1 : 0); // still pooling: the block came back to the free list
        IMemoryOwner<byte> again = loop.MemoryPool.Rent();
        Assert.Equal(1, pool.Regions);
        again.Dispose();

        loop.Dispose(); // the loop's stop ends the pool: nothing tracked or registered any more
        Assert.Equal(0, pool.Regions);
        Assert.Equal(0, loop.Counters.RegisteredMemoryBytes);
        using IMemoryOwner<byte> late = loop.MemoryPool.Rent(); // a connection still writing after the stop
        late.Memory.Span.Fill(1);
        Assert.Equal(0, pool.Regions);
    }

    [Fact]
    public async Task A_custom_send_zc_names_a_pool_block_as_a_fixed_buffer()
    {
        using var loop = new EventLoop();
        using var handler = new RecordingHandler(loop);
        using var receiver = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        receiver.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        using var sender = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        sender.Connect(receiver.LocalEndPoint!);
        using IMemoryOwner<byte> block = loop.MemoryPool.Rent();
        Memory<byte> payload = block.Memory[..1000];
        RandomNumberGenerator.Fill(payload.Span);
        await Eventually.WaitForAsync(() => OnLoopAsync(loop, () => loop.TryGetRegisteredBuffer(payload, out _)).Result);

        using MemoryHandle pin = payload.Pin();
        await handler.OnLoopAsync(h =>
        {
            Assert.True(loop.TryGetRegisteredBuffer(payload, out ushort index));
            unsafe
            {
                h.Submit(new io_uring_sqe
                {
                    opcode = IORING_OP_SEND_ZC,
                    fd = (int)sender.Handle,
                    ioprio = IORING_RECVSEND_FIXED_BUF,
                    buf_index = index,
                    addr = (ulong)pin.Pointer,
                    len = (uint)payload.Length,
                }, 42);
            }
        });
        await handler.WaitForAsync(2); // the result, then the notification
        Assert.Equal(payload.Length, handler.Completions.First().Result);
        Assert.Contains(handler.Completions, c => (c.Flags & IORING_CQE_F_NOTIF) != 0);
        byte[] received = new byte[2000];
        int length = receiver.Receive(received);
        Assert.Equal(payload.ToArray(), received[..length]);
    }

    [Fact]
    public void Fixed_sendmsg_zc_is_found_exactly_on_kernels_that_have_it()
    {
        Assert.Equal(KernelFeatures.AtLeast(6, 15), IoUringCapabilities.Current.HasZeroCopySendMsgFixed);
    }

    private static async Task<(IoUringConnection Server, EventLoopCounters Counters)> DownloadAndCheckAsync(IoUringNetwork network, int size, int connections = 4)
    {
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        int blocks = network.RentedMemoryBlocks;
        // Paired one at a time (parallel accepts could hand a client another client's server side), then all at once.
        var pairs = new List<(Socket Client, IoUringConnection Server)>();
        for (int i = 0; i < connections; i++)
        {
            var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            await client.ConnectAsync(listener.LocalEndPoint);
            pairs.Add((client, (await listener.AcceptAsync())!));
        }
        await Task.WhenAll(pairs.Select(async pair =>
        {
            using Socket client = pair.Client;
            IoUringConnection server = pair.Server;
            byte[] payload = RandomNumberGenerator.GetBytes(size);
            byte[] got = await ZeroCopyTests.TransferAsync(server, client, payload, chunk: 100_000);
            if (!payload.AsSpan().SequenceEqual(got))
            {
                int at = payload.AsSpan().CommonPrefixLength(got);
                int poisoned = got.Skip(at).Take(PinnedBlockMemoryPool.BlockSize).Count(b => b == PinnedBlockMemoryPool.PoisonByte);
                Assert.Fail($"expected {payload.Length} bytes, got {got.Length}; first difference at {at}, {poisoned} poison bytes in the next block's worth");
            }
        }));
        // Every block held for a notification came back once the notifications arrived.
        await Eventually.WaitForAsync(() => network.RentedMemoryBlocks == blocks);
        Assert.Equal(blocks, network.RentedMemoryBlocks);
        return (pairs[^1].Server, network.Loops[0].Counters);
    }

    [Fact]
    public async Task Forced_zero_copy_sends_from_registered_buffers_deliver_every_byte_and_return_every_block()
    {
        await using var network = new IoUringNetwork(ForcedZeroCopy());
        var (server, counters) = await DownloadAndCheckAsync(network, 16 * 1024 * 1024);
        Assert.False(server.ZeroCopyReverted);
        Assert.True(counters.ZeroCopySends > 100, $"{counters.ZeroCopySends} zero-copy sends");
        // Where gathers may be fixed (6.15), a send stops at its first region's end, so nearly all are fixed; before,
        // only single-segment sends are (the next test), and these 100,000-byte writes make gathers.
        Assert.True(!IoUringCapabilities.Current.HasZeroCopySendMsgFixed || counters.ZeroCopySendsFixed > counters.ZeroCopySends * 3 / 4, $"{counters.ZeroCopySendsFixed} of {counters.ZeroCopySends} from fixed buffers");
        if (IoUringCapabilities.Current.HasZeroCopyReportUsage)
        {
            Assert.True(counters.ZeroCopySendsCopied > 0); // loopback: the kernel copied, and said so
        }
    }

    [Fact]
    public async Task Single_block_sends_go_from_fixed_buffers_on_every_kernel()
    {
        // One block per send (each write fills a fresh 16 KiB block, the next waits until it was sent): SEND_ZC with
        // IORING_RECVSEND_FIXED_BUF, which every kernel with SEND_ZC has (6.0).
        await using var network = new IoUringNetwork(ForcedZeroCopy());
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        IoUringConnection server = (await listener.AcceptAsync())!;
        // Let the first region's registration land on the loop first (a block of an unregistered region goes unfixed).
        network.Loops[0].MemoryPool.Rent().Dispose();
        await Eventually.WaitForAsync(() => OnLoopAsync(network.Loops[0], () => network.Loops[0].BufferTable!.Registered).Result > 0);
        byte[] payload = RandomNumberGenerator.GetBytes(64 * PinnedBlockMemoryPool.BlockSize);
        Task<byte[]> receive = Task.Run(async () =>
        {
            using var received = new MemoryStream();
            await new NetworkStream(client).CopyToAsync(received);
            return received.ToArray();
        });
        for (int offset = 0; offset < payload.Length; offset += PinnedBlockMemoryPool.BlockSize)
        {
            await server.Output.WriteAsync(payload.AsMemory(offset, PinnedBlockMemoryPool.BlockSize));
            int sent = offset + PinnedBlockMemoryPool.BlockSize;
            await Eventually.WaitForAsync(() => server.BytesSent == sent);
        }
        await server.DisposeAsync();
        EchoTests.AssertSameBytes(payload, await receive);
        EventLoopCounters counters = network.Loops[0].Counters;
        Assert.Equal(64, counters.ZeroCopySends);
        Assert.True(counters.ZeroCopySendsFixed >= 60, $"{counters.ZeroCopySendsFixed} of 64 from fixed buffers");
    }

    [Fact]
    public async Task When_the_kernel_refuses_registration_zero_copy_sends_go_without_fixed_buffers()
    {
        // As under a low RLIMIT_MEMLOCK without CAP_IPC_LOCK: the kernel answers ENOMEM.
        await using var network = new IoUringNetwork(ForcedZeroCopy(new TestHooks { BufferRegistrationErrno = Errno.ENOMEM }));
        var (_, counters) = await DownloadAndCheckAsync(network, 8 * 1024 * 1024);
        Assert.True(counters.ZeroCopySends > 50, $"{counters.ZeroCopySends} zero-copy sends");
        Assert.Equal(0, counters.ZeroCopySendsFixed);
        Assert.Equal(Errno.ENOMEM, await OnLoopAsync(network.Loops[0], () => network.Loops[0].BufferTable!.RefusedErrno));
    }

    [Fact]
    public async Task Without_fixed_sendmsg_zc_only_single_segment_sends_use_fixed_buffers()
    {
        // As before 6.15, where a SENDMSG_ZC with FIXED_BUF fails with EINVAL: gather sends go zero-copy unfixed.
        IoUringCapabilities caps = IoUringCapabilities.Current.WithoutFixedSendMsgForTesting();
        await using var network = new IoUringNetwork(ForcedZeroCopy(new TestHooks { Capabilities = caps }));
        var (server, counters) = await DownloadAndCheckAsync(network, 8 * 1024 * 1024);
        Assert.False(server.ZeroCopyReverted);
        Assert.True(counters.ZeroCopySends > counters.ZeroCopySendsFixed, "gather sends went zero-copy without fixed buffers");
    }

    [Fact]
    public async Task With_a_pool_of_the_users_sends_never_use_fixed_buffers()
    {
        IoUringNetworkOptions options = ForcedZeroCopy();
        using var pool = new PinnedBlockMemoryPool(trim: false);
        options.MemoryPool = pool;
        await using var network = new IoUringNetwork(options);
        var (_, counters) = await DownloadAndCheckAsync(network, 4 * 1024 * 1024, connections: 1);
        Assert.True(counters.ZeroCopySends > 0);
        Assert.Equal(0, counters.ZeroCopySendsFixed); // another pool's blocks are not in this ring's table
    }
}
