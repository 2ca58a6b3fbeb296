using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Text;
using IoUring.Interop;
using IoUring.Net;
using IoUring.Testing;
using IoUring.Tests.Support;
using Microsoft.Win32.SafeHandles;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Net;

// What ends a file send early or refuses it: a file too short or shrinking, cancellation and close mid-file, a second
// file or a waiting flush. Each leaves no fd behind.
public sealed partial class SendFileTests
{
    [Fact]
    public async Task A_range_past_the_end_of_the_file_fails_before_anything_is_sent_and_the_connection_goes_on()
    {
        byte[] content = Pattern(1000, seed: 5);
        string path = WriteFile(content);
        int pipes = Pipes();
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            Task<byte[]> receiving = ReceiveAllAsync(client);
            using (SafeFileHandle file = Open(path))
            {
                EndOfStreamException error = await Assert.ThrowsAsync<EndOfStreamException>(
                    () => server.SendFileAsync(file, 0, 5000, CancellationToken.None));
                Assert.Contains("1000 bytes", error.Message);
                await Assert.ThrowsAsync<EndOfStreamException>(
                    () => server.SendFileAsync(file, 1001, 0, CancellationToken.None));
            }
            byte[] after = Encoding.ASCII.GetBytes("still usable");
            await server.Output.WriteAsync(after);
            await server.DisposeAsync();
            Assert.Equal(after, await receiving);
        }
        Assert.Equal(pipes, Pipes());
        Assert.Equal(0, FdCount.Matching(path)); // the handle's reference was given back: disposing it closed the file
    }

    [Fact]
    public async Task A_file_that_shrinks_while_it_is_sent_fails_naming_where_it_ended_after_the_bytes_before()
    {
        byte[] content = Pattern(24 * 1024 * 1024, seed: 9);
        string path = WriteFile(content);
        const int Shrunk = 16 * 1024 * 1024;
        int pipes = Pipes();
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            using (SafeFileHandle file = Open(path))
            {
                // The peer does not read yet: the send waits within the socket buffers' few MiB, far before 16 MiB.
                Task sending = server.SendFileAsync(file, 0, content.Length, CancellationToken.None);
                await Task.Delay(200);
                Assert.False(sending.IsCompleted);
                using (var writer = new FileStream(path, FileMode.Open, FileAccess.Write, FileShare.ReadWrite))
                {
                    writer.SetLength(Shrunk);
                }
                Task<byte[]> receiving = ReceiveAllAsync(client);
                EndOfStreamException error = await Assert.ThrowsAsync<EndOfStreamException>(() => Within(sending));
                Assert.Contains($"offset {Shrunk}", error.Message);
                Assert.Equal(Shrunk, server.BytesSent);
                await server.DisposeAsync();
                AssertSameBytes(content[..Shrunk], await receiving);
            }
        }
        Assert.Equal(pipes, Pipes());
    }

    [Fact]
    public async Task Cancelling_mid_file_ends_the_send_and_leaks_nothing()
    {
        byte[] content = Pattern(16 * 1024 * 1024, seed: 13);
        string path = WriteFile(content);
        int pipes = Pipes();
        int fds = FdCount.Owned();
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        {
            using var cancel = new CancellationTokenSource();
            using (SafeFileHandle file = Open(path))
            {
                // The peer stops reading: the splice to the socket waits in the kernel until the cancel interrupts it.
                Task sending = server.SendFileAsync(file, 0, content.Length, cancel.Token);
                await Task.Delay(300);
                Assert.False(sending.IsCompleted);
                Assert.Equal(pipes + 2, Pipes());
                cancel.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => Within(sending));
                Assert.Equal(pipes, Pipes());
            }
            Assert.Equal(0, FdCount.Matching(path));

            // The connection goes on: what is written next follows the part of the file that went.
            byte[] after = Encoding.ASCII.GetBytes("after the cancel");
            Task<byte[]> receiving = ReceiveAllAsync(client);
            await server.Output.WriteAsync(after);
            await server.DisposeAsync();
            byte[] received = await receiving;
            int sent = received.Length - after.Length;
            Assert.InRange(sent, 1, content.Length - 1);
            Assert.Equal(server.BytesSent, received.Length);
            AssertSameBytes([.. content[..sent], .. after], received);
        }
        await Eventually.WaitForAsync(() => FdCount.Owned() <= fds);
        Assert.Equal(fds, FdCount.Owned());
    }

    [Fact]
    public async Task A_file_still_waiting_for_the_bytes_before_it_is_cancelled_or_failed_at_once()
    {
        string path = WriteFile(Pattern(1024, seed: 19));
        byte[] before = Pattern(16 * 1024 * 1024, seed: 20);
        int pipes = Pipes();
        // No backpressure: flushes return at once, so the file queues behind bytes the peer has not taken.
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, MaxWriteBufferSize = null });
        await using (network)
        {
            await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
            (Socket client, IoUringConnection cancelled) = await LoopbackPairs.ConnectAsync(listener);
            using (client)
            {
                using var cancel = new CancellationTokenSource();
                await cancelled.Output.WriteAsync(before);
                Task sending = cancelled.SendFileAsync(path, 0, null, cancel.Token);
                await Task.Delay(100);
                Assert.False(sending.IsCompleted);
                cancel.Cancel();
                await Assert.ThrowsAnyAsync<OperationCanceledException>(() => Within(sending));

                // None of the file went: the bytes before it, then what is written next.
                byte[] after = Encoding.ASCII.GetBytes("after");
                await cancelled.Output.WriteAsync(after);
                Task<byte[]> receiving = ReceiveAllAsync(client);
                await cancelled.DisposeAsync();
                AssertSameBytes([.. before, .. after], await receiving);
            }

            (Socket client2, IoUringConnection aborted) = await LoopbackPairs.ConnectAsync(listener);
            using (client2)
            {
                await aborted.Output.WriteAsync(before);
                Task sending = aborted.SendFileAsync(path, 0, null, CancellationToken.None);
                await Task.Delay(100);
                aborted.Abort();
                await Assert.ThrowsAsync<IOException>(() => Within(sending));
            }
        }
        Assert.Equal(pipes, Pipes());
        Assert.Equal(0, FdCount.Matching(path));
    }

    [Fact]
    public async Task A_close_mid_file_fails_the_send_and_closes_its_pipe()
    {
        byte[] content = Pattern(16 * 1024 * 1024, seed: 17);
        string path = WriteFile(content);
        int pipes = Pipes();
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(_listener);
        using (client)
        using (SafeFileHandle file = Open(path))
        {
            client.ReceiveBufferSize = 4096;
            Task sending = server.SendFileAsync(file, 0, content.Length, CancellationToken.None);
            // A second file meanwhile is refused (flushes are held back until the file has gone).
            AssertRefused(() => server.SendFileAsync(file, 0, 1, CancellationToken.None));
            await Task.Delay(300);
            Assert.Equal(pipes + 2, Pipes());
            server.Abort();
            await Assert.ThrowsAsync<IOException>(() => sending.WaitAsync(TimeSpan.FromSeconds(10)));
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            Assert.Equal(pipes, Pipes());
            await Assert.ThrowsAsync<IOException>(() => server.SendFileAsync(file, 0, 1, CancellationToken.None));
        }
        Assert.Equal(pipes, Pipes());
    }

    [Fact]
    public async Task A_loop_that_stops_with_no_sqe_for_a_file_send_nor_the_close_lets_go_of_every_fd()
    {
        // The loop refuses every request of its owners from the file send's first one on (as when the SQ stays full
        // after an early submit): each is tried again next iteration, and the stop comes while they are. Whatever
        // holds an fd must let it go once the loop is gone: the file send its pipe and the file, the connection its
        // socket (whose CLOSE never got an SQE).
        byte[] content = Pattern(1024 * 1024, seed: 23);
        string path = WriteFile(content);
        int pipes = Pipes();
        var faults = new FaultInjector([IoUringConstants.IORING_OP_NOP], [Errno.EIO], probability: 0, seed: 1);
        var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop =
            {
                Hooks = new() { Faults = faults, ShutdownDeadline = TimeSpan.FromMilliseconds(300) },
                UnhandledException = _ => { }, // the refusals
            },
        });
        IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
        await listener.DisposeAsync();
        int socketFd = server.FileDescriptor;
        string? socket = new FileInfo($"/proc/self/fd/{socketFd}").LinkTarget;
        Assert.StartsWith("socket:", socket, StringComparison.Ordinal);
        using (client)
        using (SafeFileHandle file = Open(path))
        {
            faults.RefuseSqes(int.MaxValue);
            Task sending = server.SendFileAsync(file, 0, content.Length, CancellationToken.None);
            await Eventually.WaitForAsync(() => faults.SqesRefused >= 3); // its retries are under way
            Assert.False(sending.IsCompleted);
            Assert.Equal(pipes + 2, Pipes());

            await network.Loops[0].StopAsync().WaitAsync(TimeSpan.FromSeconds(30));
            await Assert.ThrowsAsync<IOException>(() => Within(sending));
            Assert.Equal(pipes, Pipes());
            Assert.NotEqual(socket, new FileInfo($"/proc/self/fd/{socketFd}").LinkTarget); // closed (or reused)
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        }
        Assert.Equal(0, FdCount.Matching(path));
        await network.DisposeAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
    }

    [Fact]
    public async Task A_file_send_is_refused_while_a_flush_waits_or_after_Output_completed()
    {
        string path = WriteFile(Pattern(10, seed: 1));
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1, MaxWriteBufferSize = 64 * 1024 });
        await using (network)
        {
            await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
            (Socket client, IoUringConnection server) = await LoopbackPairs.ConnectAsync(listener);
            using (client)
            using (SafeFileHandle file = Open(path))
            {
                client.ReceiveBufferSize = 4096;
                // The peer does not read: a flush soon waits for room. One still pending after 300 ms waits for good
                // (a flush seen pending at once may still complete as the loop fills the socket's buffers: on 6.1
                // under emulation it did, and the SendFileAsync below was queued instead of refused).
                Task<FlushResult>? flushing = null;
                for (int i = 0; i < 1000 && flushing is null; i++)
                {
                    Task<FlushResult> flush = server.Output.WriteAsync(new byte[16 * 1024]).AsTask();
                    if (await Task.WhenAny(flush, Task.Delay(300)) != flush)
                    {
                        flushing = flush;
                    }
                }
                Assert.NotNull(flushing);
                AssertRefused(() => server.SendFileAsync(file, 0, 10, CancellationToken.None));
                server.Abort();
                Assert.True((await flushing.WaitAsync(TimeSpan.FromSeconds(10))).IsCompleted);

                (Socket client2, IoUringConnection server2) = await LoopbackPairs.ConnectAsync(listener);
                using (client2)
                {
                    server2.Output.Complete();
                    AssertRefused(() => server2.SendFileAsync(file, 0, 10, CancellationToken.None));
                    await server2.DisposeAsync();
                }
            }
        }
    }
}
