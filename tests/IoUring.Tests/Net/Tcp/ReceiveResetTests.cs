using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Net;

namespace IoUring.Tests.Net;

/// <summary>A peer reset that arrives behind bytes still queued in the socket must still end the application's read (also while paused by backpressure: the rest of backpressure is in <see cref="BackpressureTests"/>).</summary>
public sealed partial class ReceiveResetTests
{
    private const int TcpClose = 7; // tcp_info.tcpi_state once the reset has arrived

    [LibraryImport("libc", SetLastError = true)]
    private static partial int getsockopt(int fd, int level, int name, Span<byte> value, ref int length);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int setsockopt(int fd, int level, int name, in int value, int length);

    [LibraryImport("libc", SetLastError = true)]
    private static partial int ioctl(int fd, ulong request, out int value);

    // Read with TCP_INFO, which (unlike SO_ERROR or a recv) leaves the pending reset error in place.
    private static int TcpState(int fd)
    {
        Span<byte> info = stackalloc byte[256];
        int length = info.Length;
        Assert.Equal(0, getsockopt(fd, 6 /* IPPROTO_TCP */, 11 /* TCP_INFO */, info, ref length));
        return info[0];
    }

    private static int QueuedBytes(int fd)
    {
        Assert.Equal(0, ioctl(fd, 0x541B /* FIONREAD */, out int queued));
        return queued;
    }

    private static async Task<Exception?> ReadUntilEndAsync(PipeReader input)
    {
        try
        {
            while (true)
            {
                ReadResult result = await input.ReadAsync();
                input.AdvanceTo(result.Buffer.End);
                if (result.IsCompleted)
                {
                    return null;
                }
            }
        }
        catch (Exception e)
        {
            return e;
        }
    }

    [Fact]
    public async Task A_reset_while_paused_by_backpressure_fails_the_input_read_once_the_application_reads()
    {
        // The application does not read: Input fills up, receiving pauses, and more bytes wait in the socket. The peer
        // resets. Then the application reads: receiving resumes with a new RECV, which reads the queued bytes (more
        // than it takes in one go, in small ring buffers) and must then report the reset rather than wait forever.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            MaxReadBufferSize = 1 << 20,
            Loop = { BufferCount = 1024, BufferSize = 1024 },
        });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        for (int round = 0; round < 3; round++)
        {
            var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            await client.ConnectAsync(listener.LocalEndPoint!);
            IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
            var paused = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
            server.OnBackpressure((_, pausing) => { if (pausing) { paused.TrySetResult(); } }, null);
            // A receive buffer large enough that a good part of the upload waits in the socket during the pause.
            Assert.Equal(0, setsockopt(server.FileDescriptor, 1 /* SOL_SOCKET */, 8 /* SO_RCVBUF */, 256 * 1024, sizeof(int)));

            // Send until the server has paused and the kernel then pushes back for a while: its socket is full too. (Not
            // the pushing back alone: under emulation a slow server can leave the client stalled before Input is full.)
            client.Blocking = false;
            byte[] chunk = new byte[64 * 1024];
            var deadline = DateTime.UtcNow.AddSeconds(30);
            for (int stalls = 0; (stalls < 20 || !paused.Task.IsCompleted) && DateTime.UtcNow < deadline;)
            {
                try
                {
                    client.Send(chunk);
                    stalls = 0;
                }
                catch (SocketException e) when (e.SocketErrorCode == SocketError.WouldBlock)
                {
                    stalls++;
                    await Task.Delay(10);
                }
            }
            await paused.Task.WaitAsync(TimeSpan.FromSeconds(10));

            client.LingerState = new LingerOption(true, 0);
            client.Close();
            for (int i = 0; i < 500 && TcpState(server.FileDescriptor) != TcpClose; i++)
            {
                await Task.Delay(10);
            }
            Assert.Equal(TcpClose, TcpState(server.FileDescriptor));
            long expected = server.BytesReceived + QueuedBytes(server.FileDescriptor); // no byte can follow the reset
            Assert.True(expected - server.BytesReceived >= 64 * 1024, $"only {expected - server.BytesReceived} B were queued in the socket at the reset");

            Task<Exception?> reading = ReadUntilEndAsync(server.Input);
            Task ended = await Task.WhenAny(reading, Task.Delay(TimeSpan.FromSeconds(10)));
            Assert.True(ended == reading, $"round {round + 1}: the input read did not end within 10 s of the reset ({server.BytesReceived} of {expected} B received)");
            var error = Assert.IsAssignableFrom<IOException>(await reading);
            Assert.Equal(SocketError.ConnectionReset, Assert.IsType<SocketException>(error.InnerException).SocketErrorCode);
            Assert.Equal(expected, server.BytesReceived); // every byte queued ahead of the reset, then the reset
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        }
    }
}
