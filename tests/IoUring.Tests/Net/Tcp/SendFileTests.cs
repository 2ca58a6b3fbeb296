using System.Buffers;
using System.Net;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text;
using IoUring.Interop;
using IoUring.Net;
using IoUring.Testing;
using IoUring.Tests.Support;
using Microsoft.Win32.SafeHandles;
using static IoUring.Interop.IoUringConstants;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Net;

/// <summary>
/// <see cref="IoUringConnection.SendFileAsync(SafeFileHandle, long, long, CancellationToken)"/> against a
/// System.Net.Sockets peer, compared by SHA-256: whole files around the pipe's 64 KiB, a range in the middle, its place
/// among Output's bytes, the read-and-send way where the kernel refuses to splice; what ends a send early is in
/// SendFileTests.Failures.cs. Counts fds (the pipe is the send's own): runs alone.
/// </summary>
[Collection(FdCountingCollection.Name)]
public sealed partial class SendFileTests : IAsyncLifetime
{
    private readonly string _directory = Path.Combine(Path.GetTempPath(), $"iouring-sendfile-{Guid.NewGuid():N}");
    private IoUringNetwork _network = null!;
    private IoUringListener _listener = null!;

    public Task InitializeAsync()
    {
        Directory.CreateDirectory(_directory);
        (_network, _listener) = Listen(faults: null);
        return Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        await _listener.DisposeAsync();
        await _network.DisposeAsync();
        Directory.Delete(_directory, recursive: true);
    }

    private static (IoUringNetwork, IoUringListener) Listen(FaultInjector? faults)
    {
        var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop = { Hooks = new() { Faults = faults } },
        });
        return (network, network.Listen(new IPEndPoint(IPAddress.Loopback, 0)));
    }

    private string WriteFile(byte[] content)
    {
        string path = Path.Combine(_directory, $"{Guid.NewGuid():N}.bin");
        File.WriteAllBytes(path, content);
        return path;
    }

    private static SafeFileHandle Open(string path) => File.OpenHandle(path, FileMode.Open, FileAccess.Read);

    private static int Pipes() => FdCount.Matching("pipe:");

    private static Task Within(Task task) => task.WaitAsync(TimeSpan.FromSeconds(30));

    /// <summary>Refused: the call throws before it returns a task.</summary>
    private static void AssertRefused(Func<Task> call)
        => Assert.Throws<InvalidOperationException>(() => { _ = call(); });

    /// <summary>Reads until the server's FIN.</summary>
    private static async Task<byte[]> ReceiveAllAsync(Socket client)
    {
        var received = new MemoryStream();
        var buffer = new byte[256 * 1024];
        int n;
        while ((n = await client.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(30))) > 0)
        {
            received.Write(buffer, 0, n);
        }
        return received.ToArray();
    }

    private static void AssertSameBytes(byte[] expected, byte[] actual)
    {
        Assert.Equal(expected.Length, actual.Length);
        Assert.Equal(Convert.ToHexString(SHA256.HashData(expected)), Convert.ToHexString(SHA256.HashData(actual)));
    }

    /// <summary>
    /// Runs <paramref name="send"/> while the client reads, then closes the server gracefully (FIN after the data) and
    /// compares what the client got with <paramref name="expected"/>.
    /// </summary>
    private static async Task AssertArrivesAsync(
        Socket client, IoUringConnection server, byte[] expected, Func<Task> send)
    {
        Task<byte[]> receiving = ReceiveAllAsync(client);
        await Within(send());
        await server.DisposeAsync();
        AssertSameBytes(expected, await receiving);
    }

    [Theory]
    [InlineData(0)]
    [InlineData(1)]
    [InlineData(64 * 1024 - 1)]
    [InlineData(64 * 1024 + 1)]
    [InlineData(16 * 1024 * 1024)]
    public async Task A_whole_file_arrives_intact(int length)
    {
        byte[] content = Pattern(length, seed: length);
        string path = WriteFile(content);
        int pipes = Pipes();
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        using (SafeFileHandle file = Open(path))
        {
            await AssertArrivesAsync(client, server, content,
                () => server.SendFileAsync(file, 0, length, CancellationToken.None));
            Assert.Equal(length, server.BytesSent);
        }
        Assert.Equal(pipes, Pipes());
    }

    [Fact]
    public async Task A_range_in_the_middle_of_a_file_arrives_intact()
    {
        byte[] content = Pattern(1024 * 1024 + 123, seed: 7);
        string path = WriteFile(content);
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        using (SafeFileHandle file = Open(path))
        {
            byte[] expected = [.. content[4097..(4097 + 300_001)], content[100], .. content[(1024 * 1024)..]];
            await AssertArrivesAsync(client, server, expected, async () =>
            {
                // Not page aligned, longer than the pipe: the first splice ends at a page boundary.
                await server.SendFileAsync(file, 4097, 300_001, CancellationToken.None);
                await server.SendFileAsync(file, 100, 1, CancellationToken.None);
                // The path's overload: the rest of the file from an offset.
                await server.SendFileAsync(path, 1024 * 1024, null, CancellationToken.None);
            });
        }
    }

    [Fact]
    public async Task A_file_arrives_intact_over_a_Unix_socket()
    {
        byte[] content = Pattern(2 * 1024 * 1024 + 3, seed: 21);
        string path = WriteFile(content);
        var endPoint = new UnixDomainSocketEndPoint(Path.Combine(_directory, "server.sock"));
        await using IoUringListener listener = _network.Listen(endPoint);
        using var client = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
        await client.ConnectAsync(endPoint);
        IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        await AssertArrivesAsync(client, server, content,
            () => server.SendFileAsync(path, 0, null, CancellationToken.None));
    }

    [Fact]
    public async Task A_non_blocking_socket_that_is_full_is_polled_until_it_has_room()
    {
        byte[] content = Pattern(16 * 1024 * 1024, seed: 23);
        string path = WriteFile(content);
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            // O_NONBLOCK on the socket's file description (the Socket's fd is a duplicate): a splice to it that finds
            // no room says EAGAIN instead of waiting.
            server.Socket.Blocking = false;
            Assert.NotEqual(0, Libc.fcntl(server.FileDescriptor, 3 /* F_GETFL */, 0) & Libc.O_NONBLOCK);
            Task sending = server.SendFileAsync(path, 0, null, CancellationToken.None);
            await Task.Delay(200); // the peer does not read yet: the socket fills up
            Assert.False(sending.IsCompleted);
            Task<byte[]> receiving = ReceiveAllAsync(client);
            await Within(sending);
            await server.DisposeAsync();
            AssertSameBytes(content, await receiving);
        }
    }

    [Fact]
    public async Task The_file_goes_after_what_was_written_before_the_call_and_before_what_is_flushed_after()
    {
        byte[] content = Pattern(4 * 1024 * 1024, seed: 3);
        string path = WriteFile(content);
        byte[] flushed = Encoding.ASCII.GetBytes("flushed before;");
        byte[] written = Encoding.ASCII.GetBytes("written, not flushed, before;");
        byte[] during = Encoding.ASCII.GetBytes("flushed while the file is sent;");
        byte[] after = Encoding.ASCII.GetBytes("written after it completed");
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        using (SafeFileHandle file = Open(path))
        {
            byte[] expected = [.. flushed, .. written, .. content, .. during, .. after];
            await AssertArrivesAsync(client, server, expected, async () =>
            {
                await server.Output.WriteAsync(flushed);
                server.Output.Write(written);
                Task sending = server.SendFileAsync(file, 0, content.Length, CancellationToken.None);
                await server.Output.WriteAsync(during); // held back until the file has gone
                await sending;
                await server.Output.WriteAsync(after);
            });
        }
    }

    [Fact]
    public async Task Where_the_kernel_refuses_to_splice_the_file_is_read_and_sent()
    {
        // Every SPLICE fails with EINVAL, as from a file system without splice_read.
        var faults = new FaultInjector([IORING_OP_SPLICE], [Errno.EINVAL], probability: 1, seed: 1);
        (IoUringNetwork network, IoUringListener listener) = Listen(faults);
        await using (network)
        await using (listener)
        {
            byte[] content = Pattern(3 * 1024 * 1024 + 5, seed: 11);
            string path = WriteFile(content);
            int pipes = Pipes();
            (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
            using (client)
            using (SafeFileHandle file = Open(path))
            {
                await AssertArrivesAsync(client, server, content[5..],
                    () => server.SendFileAsync(file, 5, content.Length - 5, CancellationToken.None));
            }
            Assert.Equal(1, faults.Injected); // the first splice, then reads and sends only
            Assert.Equal(pipes, Pipes());
        }
    }
}
