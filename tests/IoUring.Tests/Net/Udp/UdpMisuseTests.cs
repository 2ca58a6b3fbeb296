using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Net;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>
/// A caller's misuse of a send's or a receive's <see cref="ValueTask"/> (its result taken before it completed, or
/// twice) fails that call with <see cref="InvalidOperationException"/> and reaches nothing else: the kernel keeps the
/// memory it reads until its completion, no pooled operation is handed out twice, no datagram is lost, and the
/// process lives on.
/// </summary>
public sealed class UdpMisuseTests : NetworkTests
{
    [Fact]
    public async Task The_result_of_a_pending_handed_over_send_taken_early_fails_that_call_and_the_kernel_keeps_the_buffer()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 }); // every send waits for the kernel
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        var owners = new List<PoisoningOwner>();
        int early = 0;
        for (int i = 0; i < 40; i++)
        {
            var owner = new PoisoningOwner(1200 * 20);
            RandomNumberGenerator.Fill(owner.Memory.Span);
            byte[] expected = owner.Memory[..(1200 * 19 + 7)].ToArray();
            owners.Add(owner);
            ValueTask<int> send = sender.SendSegmentsToAsync(owner, expected.Length, 1200, to);
            if (!send.IsCompleted)
            {
                // The send may complete between the check and this call: then it returns its result.
                switch (Record.Exception(() => send.Result))
                {
                    case null:
                        break;
                    case InvalidOperationException:
                        early++;
                        break;
                    case var other:
                        Assert.Fail($"taken early, the result threw {other}");
                        break;
                }
            }
            await SegmentOffloadTests.AssertReceivedAsync(peer, expected, 1200); // poison, had it been disposed early
        }

        Assert.True(early > 0, "no send was still pending when its result was taken");
        await Eventually.WaitForAsync(() => owners.All(owner => owner.Disposals == 1));
        Assert.All(owners, owner => Assert.Equal(1, owner.Disposals));
        await Eventually.WaitForAsync(() => sender.Sender.Pending == 0);
        Assert.Equal(0, sender.Sender.Pending);
        await AssertSendsKeepTheirOwnBytesAsync(sender, peer, to);
    }

    [Fact]
    public async Task Handed_over_sends_past_the_bound_that_nobody_awaits_still_give_back_their_buffers_and_room()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 });
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        var owners = Enumerable.Range(0, 20).Select(_ => new PoisoningOwner(1200 * 4)).ToArray();
        foreach (PoisoningOwner owner in owners)
        {
            _ = sender.SendSegmentsToAsync(owner, owner.Memory.Length, 1200, to); // fire and forget
        }

        await Eventually.WaitForAsync(() => owners.All(owner => owner.Disposals == 1));
        Assert.All(owners, owner => Assert.Equal(1, owner.Disposals));
        await Eventually.WaitForAsync(() => sender.Sender.Pending == 0);
        Assert.Equal(0, sender.Sender.Pending);
        byte[] buffer = new byte[2000];
        for (int i = 0; i < owners.Length * 4; i++)
        {
            Assert.Equal(1200, peer.Receive(buffer));
        }
        await AssertSendsKeepTheirOwnBytesAsync(sender, peer, to);
    }

    [Fact]
    public async Task A_handed_over_buffer_that_cannot_be_pinned_fails_the_call_and_is_disposed_and_gives_back_its_room()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 1 });
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        var unpinnable = new UnpinnableOwner(1200 * 4);

        Assert.Throws<NotSupportedException>(() => sender.SendSegmentsToAsync(unpinnable, 1200 * 4, 1200, to));

        Assert.Equal(1, unpinnable.Disposals);
        Assert.Equal(0, sender.Sender.Pending);
        await AssertSendsKeepTheirOwnBytesAsync(sender, peer, to);
    }

    [Fact]
    public async Task A_send_s_result_taken_twice_fails_the_second_time_and_later_sends_keep_their_own_bytes()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0),
            new IoUringUdpOptions { MaxPendingSends = 0 });
        using Socket peer = Peer();
        SocketAddress to = peer.LocalEndPoint!.Serialize();
        for (int i = 0; i < 5; i++)
        {
            ValueTask<int> send = sender.SendToAsync(new byte[100], to);
            Assert.Equal(100, await send);
            Assert.Throws<InvalidOperationException>(() => send.Result);
            Assert.Equal(100, peer.Receive(new byte[200]));
        }
        await AssertSendsKeepTheirOwnBytesAsync(sender, peer, to);
    }

    [Fact]
    public async Task The_result_of_a_pending_receive_taken_early_fails_that_call_and_loses_no_datagram()
    {
        await using IoUringUdpSocket receiver = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        using Socket peer = Peer();
        EndPoint to = receiver.LocalEndPoint;
        var from = new SocketAddress(AddressFamily.InterNetwork);
        for (int i = 0; i < 10; i++)
        {
            ValueTask<DatagramResult> early = receiver.ReceiveFromAsync(new byte[100], from);
            Assert.False(early.IsCompleted);
            Assert.Throws<InvalidOperationException>(() => early.Result);

            byte[] sent = RandomNumberGenerator.GetBytes(50 + i);
            peer.SendTo(sent, to);
            byte[] buffer = new byte[100];
            DatagramResult received = await receiver.ReceiveFromAsync(buffer, from).AsTask().WaitAsync(Timeout);
            Assert.Equal(sent, buffer[..received.BytesReceived]);
        }
        // Receives waiting side by side still get one datagram each, in order.
        var waiting = Enumerable.Range(0, 4).Select(_ => (Buffer: new byte[100], Receive: receiver.ReceiveAsync(new byte[100]).AsTask())).ToArray();
        for (int i = 0; i < waiting.Length; i++)
        {
            peer.SendTo(new byte[10 + i], to);
        }
        DatagramResult[] results = await Task.WhenAll(waiting.Select(w => w.Receive)).WaitAsync(Timeout);
        Assert.Equal([10, 11, 12, 13], results.Select(r => r.BytesReceived));
    }

    /// <summary>Sends in flight side by side (each waiting for the kernel) put their own bytes on the wire: no
    /// operation went to two of them.</summary>
    private static async Task AssertSendsKeepTheirOwnBytesAsync(IoUringUdpSocket sender, Socket peer, SocketAddress to)
    {
        byte[][] payloads = [.. Enumerable.Range(0, 8).Select(i => RandomNumberGenerator.GetBytes(100 + i))];
        int[] sent = await Task.WhenAll(payloads.Select(p => sender.SendToAsync(p, to).AsTask())).WaitAsync(Timeout);
        Assert.Equal(payloads.Select(p => p.Length), sent);
        var received = new List<byte[]>();
        byte[] buffer = new byte[200];
        for (int i = 0; i < payloads.Length; i++)
        {
            int n = peer.Receive(buffer);
            received.Add(buffer[..n]);
        }
        Assert.Equal(payloads.Select(Convert.ToHexString).Order(), received.Select(Convert.ToHexString).Order());
    }

    [Fact]
    public async Task A_segmented_send_of_nearly_two_gigabytes_is_refused_for_its_segment_count()
    {
        await using IoUringUdpSocket sender = Network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        using var huge = new HugeMemory(); // its bytes are never read: the call is refused first
        SocketAddress to = new IPEndPoint(IPAddress.Loopback, 9).Serialize();

        var refused = Assert.Throws<ArgumentOutOfRangeException>(() => sender.SendSegmentsToAsync(huge.Memory, 1200, to));
        Assert.Contains("1789570 datagrams", refused.Message, StringComparison.Ordinal);
    }

    /// <summary>A span of int.MaxValue bytes over one small allocation: only for calls refused before any byte is
    /// read.</summary>
    private sealed unsafe class HugeMemory : MemoryManager<byte>
    {
        private readonly byte* _bytes = (byte*)System.Runtime.InteropServices.NativeMemory.Alloc(16);

        public override Span<byte> GetSpan() => new(_bytes, int.MaxValue);

        public override MemoryHandle Pin(int elementIndex = 0) => new(_bytes + elementIndex);

        public override void Unpin()
        {
        }

        protected override void Dispose(bool disposing) => System.Runtime.InteropServices.NativeMemory.Free(_bytes);
    }

    /// <summary>Memory whose Pin throws, as a caller's own MemoryManager may.</summary>
    private sealed class UnpinnableOwner(int size) : MemoryManager<byte>
    {
        private readonly byte[] _array = new byte[size];
        private int _disposals;

        public int Disposals => Volatile.Read(ref _disposals);

        public override Span<byte> GetSpan() => _array;

        public override MemoryHandle Pin(int elementIndex = 0) => throw new NotSupportedException("no pinning here");

        public override void Unpin()
        {
        }

        protected override void Dispose(bool disposing) => Interlocked.Increment(ref _disposals);
    }

    [Fact]
    public async Task A_batch_another_sockets_receive_filled_fails_the_receive_still_filling_it_and_the_datagram_goes_on()
    {
        using var sealing = new ManualResetEventSlim();
        var unhandled = new System.Collections.Concurrent.ConcurrentQueue<Exception>();
        // Batch completions wait before they stop their batch filling: the loop delivers on meanwhile.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop =
            {
                UnhandledException = unhandled.Enqueue,
                Hooks = new() { BeforeBatchSealed = () => sealing.Wait(TimeSpan.FromSeconds(10)) },
            },
        });
        await using IoUringUdpSocket first = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        await using IoUringUdpSocket second = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
        using Socket peer = Peer();
        var batch = new UdpDatagramBatch(capacity: 2, bufferSize: 64);

        // Misuse: one batch given to a receive of each socket at once.
        Task<int> filling = first.ReceiveBatchAsync(batch).AsTask();
        Task<int> other = second.ReceiveBatchAsync(batch).AsTask();
        peer.SendTo([1], first.LocalEndPoint);
        await Eventually.WaitForAsync(() => batch.Count == 1); // the first socket's receive keeps filling it
        peer.SendTo([2], second.LocalEndPoint);
        await Eventually.WaitForAsync(() => batch.Count == 2); // the second socket's filled it
        peer.SendTo([3], first.LocalEndPoint); // cannot join the first socket's batch
        await Eventually.WaitForAsync(() => first.DatagramsReceived == 2);
        sealing.Set();

        await Assert.ThrowsAsync<InvalidOperationException>(() => filling.WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.Equal(2, await other.WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.Empty(unhandled);
        // The datagram was not lost: the next receive gets it.
        var buffer = new byte[16];
        DatagramResult result = await first.ReceiveAsync(buffer).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        Assert.Equal(1, result.BytesReceived);
        Assert.Equal(3, buffer[0]);
    }

    private static Socket Peer()
    {
        var peer = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp);
        peer.ReceiveBufferSize = 4 << 20;
        peer.ReceiveTimeout = 10_000;
        peer.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        return peer;
    }
}
