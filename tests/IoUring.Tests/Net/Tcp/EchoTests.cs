using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using IoUring.Loops;
using IoUring.Net;
using IoUring.Rings;
using IoUring.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.Tests.Net;

/// <summary>Byte integrity through real loopback sockets, hashed both ways, with System.Net.Sockets peers on either side.</summary>
public sealed class EchoTests(ITestOutputHelper output)
{
    /// <summary>Echoes every accepted connection until its peer's FIN, each once <paramref name="start"/> (if given) completed.</summary>
    internal static async Task EchoServerAsync(IoUringListener listener, Task? start = null)
    {
        while (await listener.AcceptAsync() is { } connection)
        {
            _ = Task.Run(async () =>
            {
                await using (connection)
                {
                    if (start is not null)
                    {
                        await start;
                    }
                    try
                    {
                        await connection.Input.CopyToAsync(connection.Output);
                    }
                    catch (IOException)
                    {
                        // peer reset: nothing to echo
                    }
                    await connection.Output.CompleteAsync();
                    await connection.Input.CompleteAsync();
                }
            });
        }
    }

    /// <summary>Sends <paramref name="payload"/> in random chunks, half-closes, and returns everything read back.</summary>
    internal static async Task<byte[]> RoundTripAsync(Stream stream, Action shutdownSend, byte[] payload, int seed)
    {
        var random = new Random(seed);
        Task send = Task.Run(async () =>
        {
            int offset = 0;
            while (offset < payload.Length)
            {
                int chunk = Math.Min(payload.Length - offset, random.Next(1, 256 * 1024));
                await stream.WriteAsync(payload.AsMemory(offset, chunk));
                offset += chunk;
            }
            await stream.FlushAsync();
            shutdownSend();
        });
        using var received = new MemoryStream();
        await stream.CopyToAsync(received);
        await send;
        return received.ToArray();
    }

    public static TheoryData<string> Families => new() { "ipv4", "ipv6", "dual", "unix" };

    private static EndPoint Bindable(string family) => family switch
    {
        "ipv4" => new IPEndPoint(IPAddress.Loopback, 0),
        "ipv6" => new IPEndPoint(IPAddress.IPv6Loopback, 0),
        "dual" => new IPEndPoint(IPAddress.IPv6Any, 0),
        _ => new UnixDomainSocketEndPoint(Path.Combine(Path.GetTempPath(), $"iouring-{Guid.NewGuid():N}.sock")),
    };

    private static EndPoint Connectable(string family, EndPoint bound) => family switch
    {
        "dual" => new IPEndPoint(IPAddress.Loopback, ((IPEndPoint)bound).Port), // IPv4 client to a dual-mode listener
        _ => bound,
    };

    [Theory]
    [MemberData(nameof(Families))]
    public async Task Echo_with_system_net_sockets_clients_of_random_sizes_and_chunking(string family)
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        await using var listener = network.Listen(Bindable(family));
        _ = EchoServerAsync(listener);
        EndPoint target = Connectable(family, listener.LocalEndPoint);
        int[] sizes = [0, 1, 100, 4096, 65536 + 3, 1024 * 1024, 8 * 1024 * 1024];
        await Task.WhenAll(sizes.Select(async (size, i) =>
        {
            using var client = new Socket(target.AddressFamily, SocketType.Stream, target is UnixDomainSocketEndPoint ? ProtocolType.Unspecified : ProtocolType.Tcp);
            await client.ConnectAsync(target);
            using var stream = new NetworkStream(client);
            byte[] payload = RandomNumberGenerator.GetBytes(size);
            byte[] echoed = await RoundTripAsync(stream, () => client.Shutdown(SocketShutdown.Send), payload, i);
            AssertSameBytes(payload, echoed);
        }));
    }

    internal static void AssertSameBytes(byte[] expected, byte[] actual)
    {
        if (!expected.AsSpan().SequenceEqual(actual))
        {
            int at = expected.AsSpan().CommonPrefixLength(actual);
            Assert.Fail($"expected {expected.Length} bytes, got {actual.Length}; first difference at {at}");
        }
    }

    [Theory]
    [MemberData(nameof(Families))]
    public async Task Our_client_against_a_system_net_sockets_echo_server(string family)
    {
        EndPoint bindable = Bindable(family);
        using var server = new Socket(bindable.AddressFamily, SocketType.Stream, bindable is UnixDomainSocketEndPoint ? ProtocolType.Unspecified : ProtocolType.Tcp);
        if (family == "dual")
        {
            server.DualMode = true;
        }
        server.Bind(bindable);
        server.Listen();
        _ = Task.Run(async () =>
        {
            while (true)
            {
                Socket accepted;
                try
                {
                    accepted = await server.AcceptAsync();
                }
                catch (Exception)
                {
                    return;
                }
                _ = Task.Run(async () =>
                {
                    using (accepted)
                    {
                        byte[] buffer = new byte[65536];
                        int n;
                        while ((n = await accepted.ReceiveAsync(buffer)) > 0)
                        {
                            await accepted.SendAsync(buffer.AsMemory(0, n));
                        }
                        accepted.Shutdown(SocketShutdown.Send);
                    }
                });
            }
        });

        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        EndPoint target = Connectable(family, server.LocalEndPoint!);
        long[] lengths = await Task.WhenAll(Enumerable.Range(0, 8).Select(async i =>
        {
            await using IoUringConnection connection = await network.ConnectAsync(target);
            Assert.NotNull(connection.RemoteEndPoint);
            Stream stream = connection.AsStream();
            byte[] payload = RandomNumberGenerator.GetBytes(new Random(i).Next(0, 2 * 1024 * 1024));
            byte[] echoed = await RoundTripAsync(stream, () => connection.Output.Complete(), payload, i);
            AssertSameBytes(payload, echoed);
            Assert.Equal(payload.Length, connection.BytesSent);
            Assert.Equal(payload.Length, connection.BytesReceived);
            return (long)payload.Length;
        }));
        // The loops count the bytes of every connection on them (what the Kestrel transport's meter reports).
        EventLoopCounters total = network.Loops.Aggregate(default(EventLoopCounters), (sum, loop) => sum + loop.Counters);
        Assert.Equal(lengths.Sum(), total.BytesSent);
        Assert.Equal(lengths.Sum(), total.BytesReceived);
    }

    [Fact]
    public async Task Two_hundred_concurrent_connections_through_our_client_and_server_keep_their_own_bytes()
    {
        // A small buffer ring, so buffers are recycled between connections all the time.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, Loop = { BufferCount = 64, BufferSize = 2048 } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoServerAsync(listener);
        await Task.WhenAll(Enumerable.Range(0, 200).Select(async i =>
        {
            await using IoUringConnection connection = await network.ConnectAsync(listener.LocalEndPoint);
            // Each connection's payload is its own repeated byte pattern: any crossed byte breaks the hash.
            var random = new Random(i);
            byte[] payload = new byte[random.Next(0, 256 * 1024)];
            for (int j = 0; j < payload.Length; j++)
            {
                payload[j] = (byte)(i * 31 + j % 251);
            }
            byte[] echoed = await RoundTripAsync(connection.AsStream(), () => connection.Output.Complete(), payload, i);
            AssertSameBytes(payload, echoed);
        }));
    }

    /// <summary>
    /// This kernel's receive path, or this kernel acting as one without bundles (before 6.10; multishot RECVs capped at
    /// what Input can take) or without the multishot receive cap (before 6.17; single-shot RECVs of that length, each
    /// completion that leaves bytes in the socket holding the reader's wake for the next).
    /// </summary>
    public static TheoryData<string> ReceivePaths => new() { "kernel", "no bundles", "no receive cap" };

    private static IoUringCapabilities Receiving(string path) => path switch
    {
        "kernel" => IoUringCapabilities.Current,
        "no bundles" => IoUringCapabilities.Current.WithoutReceiveBundlesForTesting(),
        _ => IoUring.Tests.Support.KernelFeatures.WithReceiveCap(false),
    };

    [Theory]
    [MemberData(nameof(ReceivePaths))]
    public async Task A_tiny_buffer_ring_forces_ENOBUFS_and_loses_no_byte(string receivePath)
    {
        IoUringCapabilities caps = Receiving(receivePath);
        // Without the receive cap, a receive that leaves bytes in the socket is followed by one into the receiver's own
        // blocks, which spares the ring: two buffers for 32 connections make sure it runs dry there too.
        int ringBuffers = caps.HasReceiveLimit ? 16 : 2; // the kernel's own path is the cap-less one before 6.17
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { BufferCount = ringBuffers, BufferSize = 1024, Hooks = new() { Capabilities = caps } } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        // The connections are taken only once every client's first bytes wait in its socket, so the 32 receives start in
        // one loop iteration and each finds bytes at once: far more than the ring's buffers (taken as they arrived, the
        // receives could complete one by one, the ring refilled between them: it once never ran dry in 10 s in CI).
        // Nothing is read until the ring has run dry (or 10 s passed): echoing at once, a fast echo (sends from the
        // flushing threads) could finish before that ever happened.
        const int Clients = 32, FirstBytes = 16 * 1024; // 16 ring buffers of 1 KiB per connection
        int sending = 0;
        var allSending = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        Task ranDry = allSending.Task.ContinueWith(_ => Eventually.WaitForAsync(() => network.Loops[0].Counters.BufferRingExhaustions > 0)).Unwrap();
        _ = allSending.Task.ContinueWith(_ => EchoServerAsync(listener, start: ranDry)).Unwrap();
        await Task.WhenAll(Enumerable.Range(0, Clients).Select(async i =>
        {
            using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            await client.ConnectAsync(listener.LocalEndPoint);
            byte[] payload = RandomNumberGenerator.GetBytes(512 * 1024);
            await client.SendAsync(payload.AsMemory(0, FirstBytes)); // into the socket's buffer: nobody reads yet
            if (Interlocked.Increment(ref sending) == Clients)
            {
                allSending.SetResult();
            }
            byte[] echoed = await RoundTripAsync(new NetworkStream(client), () => client.Shutdown(SocketShutdown.Send), payload[FirstBytes..], i)
                .WaitAsync(TimeSpan.FromSeconds(60)); // a read left waiting for bytes that never came would hang here
            AssertSameBytes(payload, echoed);
        }));
        Assert.True(network.Loops[0].Counters.BufferRingExhaustions > 0, "the buffer ring never ran dry; the test proves nothing");
        Assert.Equal(0, network.Loops[0].Counters.ReceiveBuffersLost);
    }

    [Theory]
    [MemberData(nameof(ReceivePaths))]
    public async Task Bulk_receives_fill_several_buffers_per_completion_with_bundles_or_vectored_receives(string receivePath)
    {
        // 8 MiB each way through 1 KiB buffers: 8,192 buffers per direction. With bundles a completion takes many; without
        // the receive cap (single-shot RECVs) a receive that leaves bytes in the socket is followed by a RECVMSG into up
        // to 8 spare blocks. Only multishot RECVs without bundles take one buffer per completion.
        IoUringCapabilities caps = Receiving(receivePath);
        bool bundled = caps.HasReceiveLimit ? caps.HasReceiveBundles : true;
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, Loop = { BufferCount = 256, BufferSize = 1024, Hooks = new() { Capabilities = caps } } });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoServerAsync(listener);
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(listener.LocalEndPoint);
        byte[] payload = RandomNumberGenerator.GetBytes(8 << 20);
        long cqesBefore = network.Loops[0].Counters.Cqes;
        byte[] echoed = await RoundTripAsync(new NetworkStream(client), () => client.Shutdown(SocketShutdown.Send), payload, 1)
            .WaitAsync(TimeSpan.FromSeconds(60));
        AssertSameBytes(payload, echoed);
        long cqes = network.Loops[0].Counters.Cqes - cqesBefore; // receives, sends and the rest
        long buffersFilled = payload.Length / 1024;
        output.WriteLine($"{receivePath}: several buffers per completion {bundled}: {cqes} completions for {buffersFilled} buffers filled");
        Assert.Equal(0, network.Loops[0].Counters.ReceiveBuffersLost);
        if (bundled)
        {
            Assert.True(cqes < buffersFilled / 2, $"{cqes} completions for {buffersFilled} buffers filled: receives took one buffer each");
        }
        else
        {
            Assert.True(cqes >= buffersFilled, $"{cqes} completions for {buffersFilled} buffers filled without bundles");
        }
    }
}
