using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using BenchmarkDotNet.Attributes;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// Loopback echo: one operation sends a <see cref="MessageSize"/>-byte message on each of <see cref="Connections"/>
/// connections at once and waits until every byte has come back. Server and client live in this process and use
/// the same API: IoUring (an <see cref="IoUringNetwork"/> with default options — a loop per CPU — whose listener's
/// connections echo through their pipes, and whose <see cref="IoUringNetwork.ConnectAsync"/> clients write to
/// Output and read Input) against System.Net.Sockets (Socket.AcceptAsync and a 16 KiB-buffer
/// ReceiveAsync/SendAsync echo loop per connection; Socket clients with SendAsync/ReceiveAsync). A third job,
/// "System.Net.Sockets + Pipe", runs IoUring's echo code (the same pipe API calls: the client's Output.WriteAsync, the
/// server's Input.CopyToAsync(Output)) over sockets served as Kestrel's Sockets transport serves them (<see cref="SocketPipeConnection"/>): it tells what the
/// pipe API costs from what the transport costs. Listening, connecting and buffers are set up before measuring; the
/// measured part is only the round trips.
/// </summary>
[Config(typeof(NetJobConfig))]
public class EchoBenchmarks
{
    private const int SocketsServerBufferSize = 16 * 1024;

    private byte[] _message = [];

    // System.Net.Sockets
    private Socket? _socketListener;
    private Socket[] _socketClients = [];
    private byte[][] _clientBuffers = [];
    private readonly List<Socket> _socketServerSides = [];

    // System.Net.Sockets + Pipe
    private SocketPipeConnection[] _pipeClients = [];
    private readonly List<SocketPipeConnection> _pipeServerSides = [];

    // IoUring
    private IoUringNetwork? _network;
    private IoUringListener? _ioUringListener;
    private IoUringConnection[] _ioUringClients = [];

    private Task _acceptLoop = Task.CompletedTask;
    private Task[] _tasks = [];

    [Params(64, 4 * 1024, 64 * 1024, 1024 * 1024)]
    public int MessageSize { get; set; }

    [Params(1, 64)]
    public int Connections { get; set; }

    [GlobalSetup(Target = nameof(Sockets))]
    public void SetupSockets()
    {
        Prepare();
        ListenWithSockets(socket =>
        {
            lock (_socketServerSides)
            {
                _socketServerSides.Add(socket);
            }
            _ = EchoSocketServerAsync(socket);
        });
        _socketClients = new Socket[Connections];
        _clientBuffers = new byte[Connections][];
        for (int i = 0; i < Connections; i++)
        {
            _socketClients[i] = ConnectSocket();
            _clientBuffers[i] = new byte[MessageSize];
        }
        Sockets().GetAwaiter().GetResult(); // fails here, not in the middle of a run
    }

    [GlobalSetup(Target = nameof(SocketsWithPipes))]
    public void SetupSocketsWithPipes()
    {
        Prepare();
        ListenWithSockets(socket =>
        {
            var connection = new SocketPipeConnection(socket);
            lock (_pipeServerSides)
            {
                _pipeServerSides.Add(connection);
            }
            _ = EchoPipeServerAsync(connection.Input, connection.Output);
        });
        _pipeClients = new SocketPipeConnection[Connections];
        for (int i = 0; i < Connections; i++)
        {
            _pipeClients[i] = new SocketPipeConnection(ConnectSocket());
        }
        SocketsWithPipes().GetAwaiter().GetResult();
    }

    [GlobalSetup(Target = nameof(IoUring))]
    public void SetupIoUring()
    {
        Prepare();
        _network = new IoUringNetwork();
        _ioUringListener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _acceptLoop = AcceptIoUringAsync(_ioUringListener);
        _ioUringClients = new IoUringConnection[Connections];
        for (int i = 0; i < Connections; i++)
        {
            _ioUringClients[i] = _network.ConnectAsync(_ioUringListener.LocalEndPoint).AsTask().GetAwaiter().GetResult();
        }
        IoUring().GetAwaiter().GetResult();
    }

    /// <summary>A loopback listener whose accepted sockets (TCP_NODELAY, as the clients) go to <paramref name="serve"/>.</summary>
    private void ListenWithSockets(Action<Socket> serve)
    {
        _socketListener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        _socketListener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        _socketListener.Listen(512);
        _acceptLoop = SocketAcceptLoop.RunAsync(_socketListener, socket =>
        {
            socket.NoDelay = true;
            serve(socket);
        });
    }

    private Socket ConnectSocket()
    {
        var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
        client.Connect(_socketListener!.LocalEndPoint!);
        return client;
    }

    private void Prepare()
    {
        _message = new byte[MessageSize];
        new Random(42).NextBytes(_message);
        _tasks = new Task[Connections];
    }

    [GlobalCleanup(Target = nameof(Sockets))]
    public void CleanupSockets()
    {
        foreach (Socket client in _socketClients)
        {
            client.Dispose();
        }
        _socketListener?.Dispose();
        lock (_socketServerSides)
        {
            foreach (Socket s in _socketServerSides)
            {
                s.Dispose();
            }
            _socketServerSides.Clear();
        }
        _ = _acceptLoop.Wait(TimeSpan.FromSeconds(5));
    }

    [GlobalCleanup(Target = nameof(SocketsWithPipes))]
    public void CleanupSocketsWithPipes()
    {
        foreach (SocketPipeConnection client in _pipeClients)
        {
            client.DisposeAsync().AsTask().GetAwaiter().GetResult();
        }
        _socketListener?.Dispose();
        _ = _acceptLoop.Wait(TimeSpan.FromSeconds(5));
        lock (_pipeServerSides)
        {
            foreach (SocketPipeConnection s in _pipeServerSides)
            {
                s.DisposeAsync().AsTask().GetAwaiter().GetResult();
            }
            _pipeServerSides.Clear();
        }
    }

    [GlobalCleanup(Target = nameof(IoUring))]
    public void CleanupIoUring()
    {
        foreach (IoUringConnection client in _ioUringClients)
        {
            client.Abort();
        }
        _ioUringListener?.DisposeAsync().AsTask().GetAwaiter().GetResult();
        _network?.Dispose();
        _ = _acceptLoop.Wait(TimeSpan.FromSeconds(5));
    }

    [Benchmark(Baseline = true, Description = "System.Net.Sockets")]
    public Task Sockets()
    {
        if (Connections == 1)
        {
            return EchoSocketAsync(_socketClients[0], _clientBuffers[0]);
        }
        for (int i = 0; i < _tasks.Length; i++)
        {
            _tasks[i] = EchoSocketAsync(_socketClients[i], _clientBuffers[i]);
        }
        return Task.WhenAll(_tasks);
    }

    [Benchmark(Description = "System.Net.Sockets + Pipe")]
    public Task SocketsWithPipes()
    {
        if (Connections == 1)
        {
            return EchoPipeClientAsync(_pipeClients[0].Input, _pipeClients[0].Output);
        }
        for (int i = 0; i < _tasks.Length; i++)
        {
            _tasks[i] = EchoPipeClientAsync(_pipeClients[i].Input, _pipeClients[i].Output);
        }
        return Task.WhenAll(_tasks);
    }

    [Benchmark(Description = "IoUring")]
    public Task IoUring()
    {
        if (Connections == 1)
        {
            return EchoPipeClientAsync(_ioUringClients[0].Input, _ioUringClients[0].Output);
        }
        for (int i = 0; i < _tasks.Length; i++)
        {
            _tasks[i] = EchoPipeClientAsync(_ioUringClients[i].Input, _ioUringClients[i].Output);
        }
        return Task.WhenAll(_tasks);
    }

    // ---- System.Net.Sockets ----

    private async Task EchoSocketAsync(Socket client, byte[] buffer)
    {
        Task read = ReceiveExactlyAsync(client, buffer); // reading while writing: a large message never deadlocks
        ReadOnlyMemory<byte> message = _message;
        while (!message.IsEmpty)
        {
            int sent = await client.SendAsync(message, SocketFlags.None).ConfigureAwait(false);
            message = message[sent..];
        }
        await read.ConfigureAwait(false);
    }

    private static async Task ReceiveExactlyAsync(Socket client, byte[] buffer)
    {
        int received = 0;
        while (received < buffer.Length)
        {
            int n = await client.ReceiveAsync(buffer.AsMemory(received), SocketFlags.None).ConfigureAwait(false);
            if (n == 0)
            {
                throw new InvalidOperationException("The echo server closed the connection.");
            }
            received += n;
        }
    }

    private static async Task EchoSocketServerAsync(Socket socket)
    {
        byte[] buffer = new byte[SocketsServerBufferSize];
        try
        {
            while (true)
            {
                int n = await socket.ReceiveAsync(buffer, SocketFlags.None).ConfigureAwait(false);
                if (n == 0)
                {
                    break;
                }
                int sent = 0;
                while (sent < n)
                {
                    sent += await socket.SendAsync(buffer.AsMemory(sent, n - sent), SocketFlags.None).ConfigureAwait(false);
                }
            }
        }
        catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
        {
        }
    }

    // ---- The pipe API: IoUring, and System.Net.Sockets + Pipe ----

    private async Task EchoPipeClientAsync(PipeReader input, PipeWriter output)
    {
        Task read = ReadExactlyAsync(input, _message.Length);
        FlushResult flush = await output.WriteAsync(_message).ConfigureAwait(false);
        if (flush.IsCompleted)
        {
            throw new InvalidOperationException("The connection's output completed.");
        }
        await read.ConfigureAwait(false);
    }

    private static async Task ReadExactlyAsync(PipeReader input, long count)
    {
        while (count > 0)
        {
            ReadResult result = await input.ReadAsync().ConfigureAwait(false);
            ReadOnlySequence<byte> buffer = result.Buffer;
            long take = Math.Min(count, buffer.Length);
            input.AdvanceTo(buffer.GetPosition(take));
            count -= take;
            if (count > 0 && result.IsCompleted)
            {
                throw new InvalidOperationException("The echo server closed the connection.");
            }
        }
    }

    private static async Task AcceptIoUringAsync(IoUringListener listener)
    {
        while (await listener.AcceptAsync().ConfigureAwait(false) is { } connection)
        {
            _ = EchoIoUringServerAsync(connection);
        }
    }

    private static async Task EchoIoUringServerAsync(IoUringConnection connection)
    {
        await EchoPipeServerAsync(connection.Input, connection.Output).ConfigureAwait(false);
        connection.Abort();
    }

    // The pipe API's echo: Input copied to Output until the peer's FIN. IoUring's Input lends its received blocks to the
    // connection's Output (sent as they are); a Pipe's reader writes each segment to the writer (copied, then flushed).
    private static async Task EchoPipeServerAsync(PipeReader input, PipeWriter output)
    {
        try
        {
            await input.CopyToAsync(output).ConfigureAwait(false);
        }
        catch (Exception ex) when (ex is IOException or OperationCanceledException or InvalidOperationException or SocketException)
        {
            // aborted at cleanup
        }
    }
}
