using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using BenchmarkDotNet.Attributes;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// Accept storm: one operation is <see cref="Clients"/> clients that each connect, send 128 bytes, read the echo
/// and close, <see cref="Concurrency"/> of them at a time; it ends when the server has closed every one of them.
/// The clients are the same System.Net.Sockets code for both servers; only the server differs: an
/// <see cref="IoUringListener"/> (a multishot ACCEPT on each loop of an <see cref="IoUringNetwork"/> with default
/// options) that reads 128 bytes from Input, echoes them to Output and disposes the connection (FIN), against a
/// System.Net.Sockets listener (Socket.AcceptAsync loop) that does the same with ReceiveAsync/SendAsync/Shutdown.
/// The same io_uring server with single-shot ACCEPTs (<see cref="IoUringNetworkOptions.MultishotAccept"/> false: one
/// request per connection) is the seed "fast poll multishot mode"'s comparison.
/// </summary>
[Config(typeof(NetStormJobConfig))]
public class AcceptStormBenchmarks
{
    private const int MessageSize = 128;

    private readonly byte[] _message = new byte[MessageSize];
    private IPEndPoint _endPoint = null!;
    private Socket? _socketListener;
    private IoUringNetwork? _network;
    private IoUringListener? _ioUringListener;
    private Task _acceptLoop = Task.CompletedTask;
    private int _served;
    private TaskCompletionSource _allServed = new(TaskCreationOptions.RunContinuationsAsynchronously);

    [Params(10_000)]
    public int Clients { get; set; }

    /// <summary>Clients connecting at once (each worker runs its share one after another).</summary>
    [Params(256)]
    public int Concurrency { get; set; }

    [GlobalSetup(Target = nameof(Sockets))]
    public void SetupSockets()
    {
        _socketListener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        _socketListener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        _socketListener.Listen(512);
        _endPoint = (IPEndPoint)_socketListener.LocalEndPoint!;
        _acceptLoop = AcceptSocketsAsync(_socketListener);
    }

    [GlobalSetup(Target = nameof(IoUring))]
    public void SetupIoUring() => SetupIoUring(multishot: true);

    [GlobalSetup(Target = nameof(IoUringSingleShot))]
    public void SetupIoUringSingleShot() => SetupIoUring(multishot: false);

    private void SetupIoUring(bool multishot)
    {
        _network = new IoUringNetwork(new IoUringNetworkOptions { Backlog = 512, MultishotAccept = multishot });
        _ioUringListener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _endPoint = (IPEndPoint)_ioUringListener.LocalEndPoint;
        _acceptLoop = AcceptIoUringAsync(_ioUringListener);
    }

    [IterationSetup]
    public void ResetCount()
    {
        _served = 0;
        _allServed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    [GlobalCleanup(Target = nameof(Sockets))]
    public void CleanupSockets()
    {
        _socketListener?.Dispose();
        _ = _acceptLoop.Wait(TimeSpan.FromSeconds(5));
    }

    [GlobalCleanup(Targets = [nameof(IoUring), nameof(IoUringSingleShot)])]
    public void CleanupIoUring()
    {
        // How the connections spread over the loops (each received 128 B per connection it served).
        Console.WriteLine("// connections per loop: " + string.Join(", ", _network!.Loops.Select(l => l.Counters.BytesReceived / MessageSize)));
        _ioUringListener?.DisposeAsync().AsTask().GetAwaiter().GetResult();
        _network?.Dispose();
        _ = _acceptLoop.Wait(TimeSpan.FromSeconds(5));
    }

    [Benchmark(Baseline = true, Description = "System.Net.Sockets accept")]
    public Task Sockets() => StormAsync();

    [Benchmark(Description = "IoUring multishot accept")]
    public Task IoUring() => StormAsync();

    [Benchmark(Description = "IoUring single-shot accept")]
    public Task IoUringSingleShot() => StormAsync();

    private async Task StormAsync()
    {
        var workers = new Task[Concurrency];
        for (int w = 0; w < workers.Length; w++)
        {
            int count = Clients / Concurrency + (w < Clients % Concurrency ? 1 : 0);
            workers[w] = ClientWorkerAsync(count);
        }
        await Task.WhenAll(workers).ConfigureAwait(false);
        Task served = _allServed.Task;
        if (await Task.WhenAny(served, Task.Delay(TimeSpan.FromSeconds(30))).ConfigureAwait(false) != served)
        {
            throw new TimeoutException($"The server closed {Volatile.Read(ref _served)} of {Clients} connections.");
        }
    }

    private async Task ClientWorkerAsync(int count)
    {
        byte[] buffer = new byte[MessageSize];
        for (int i = 0; i < count; i++)
        {
            using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
            await client.ConnectAsync(_endPoint).ConfigureAwait(false);
            await client.SendAsync(_message, SocketFlags.None).ConfigureAwait(false);
            int received = 0;
            while (received < MessageSize)
            {
                int n = await client.ReceiveAsync(buffer.AsMemory(received), SocketFlags.None).ConfigureAwait(false);
                if (n == 0)
                {
                    throw new InvalidOperationException("The server closed before echoing.");
                }
                received += n;
            }
        }
    }

    private void OnServed()
    {
        if (Interlocked.Increment(ref _served) == Clients)
        {
            _allServed.TrySetResult();
        }
    }

    private async Task AcceptSocketsAsync(Socket listener)
    {
        while (true)
        {
            Socket socket;
            try
            {
                socket = await listener.AcceptAsync().ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
            {
                return;
            }
            _ = ServeSocketAsync(socket);
        }
    }

    private async Task ServeSocketAsync(Socket socket)
    {
        byte[] buffer = ArrayPool<byte>.Shared.Rent(MessageSize);
        try
        {
            socket.NoDelay = true;
            int received = 0;
            while (received < MessageSize)
            {
                int n = await socket.ReceiveAsync(buffer.AsMemory(received, MessageSize - received), SocketFlags.None).ConfigureAwait(false);
                if (n == 0)
                {
                    break;
                }
                received += n;
            }
            await socket.SendAsync(buffer.AsMemory(0, received), SocketFlags.None).ConfigureAwait(false);
            socket.Shutdown(SocketShutdown.Send);
        }
        catch (SocketException)
        {
        }
        finally
        {
            socket.Dispose();
            ArrayPool<byte>.Shared.Return(buffer);
            OnServed();
        }
    }

    private async Task AcceptIoUringAsync(IoUringListener listener)
    {
        while (await listener.AcceptAsync().ConfigureAwait(false) is { } connection)
        {
            _ = ServeIoUringAsync(connection);
        }
    }

    private async Task ServeIoUringAsync(IoUringConnection connection)
    {
        try
        {
            PipeReader input = connection.Input;
            while (true)
            {
                ReadResult result = await input.ReadAsync().ConfigureAwait(false);
                ReadOnlySequence<byte> buffer = result.Buffer;
                if (buffer.Length >= MessageSize || result.IsCompleted)
                {
                    ReadOnlySequence<byte> echo = buffer.Slice(0, Math.Min(buffer.Length, MessageSize));
                    foreach (ReadOnlyMemory<byte> segment in echo)
                    {
                        connection.Output.Write(segment.Span);
                    }
                    input.AdvanceTo(echo.End);
                    break;
                }
                input.AdvanceTo(buffer.Start, buffer.End);
            }
            await connection.Output.FlushAsync().ConfigureAwait(false);
        }
        catch (IOException)
        {
        }
        finally
        {
            await connection.DisposeAsync().ConfigureAwait(false); // graceful: the echo, then FIN
            OnServed();
        }
    }
}
