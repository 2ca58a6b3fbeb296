using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using BenchmarkDotNet.Attributes;
using IoUring.Benchmarks.Support;
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
/// <para>
/// The floor (<see cref="CServer"/>): the same clients against benchmarks/c/echo_server, a single-threaded C liburing
/// server in its own process that costs the benchmark's CPUs next to nothing, so its time is about what the clients
/// alone cost, the least any in-process server could reach. Its served count cannot be seen from here, so that job
/// ends when the clients have their echoes and does not wait for the server to close every connection, which makes
/// the floor slightly optimistic (lower): the conservative direction for a floor.
/// </para>
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
    private Process? _serverProcess;
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
        _acceptLoop = SocketAcceptLoop.RunAsync(_socketListener, socket => _ = ServeSocketAsync(socket));
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

    [GlobalSetup(Target = nameof(CServer))]
    public void SetupCServer()
    {
        string program = Path.Combine(CPrograms.Directory, "echo_server");
        if (!File.Exists(program))
        {
            CPrograms.Make("echo_server", "gcc and liburing-dev (apt-get install build-essential liburing-dev)");
        }
        var start = new ProcessStartInfo(program);
        start.ArgumentList.Add("0");
        start.ArgumentList.Add(MessageSize.ToString(CultureInfo.InvariantCulture));
        StartServerProcess(start, "It needs io_uring (kernel 6.1 or later) and liburing (make -C benchmarks/c echo_server).");
    }

    /// <summary>
    /// The IoUring server of <see cref="IoUring"/> in a process of its own, as the C floor runs (not a BenchmarkDotNet
    /// job: the paired runner and <c>--storm-trace</c> use it to tell the server's own cost from the cost of sharing a
    /// process, and its thread pool, with the clients). This program started with <c>--storm-server</c>.
    /// </summary>
    public void SetupIoUringProcess()
    {
        var start = new ProcessStartInfo(Environment.ProcessPath!);
        start.ArgumentList.Add("--storm-server");
        StartServerProcess(start, "");
    }

    /// <summary>
    /// <c>--storm-server</c>: serves <see cref="IoUring"/>'s echo on a loopback port it prints ("port N") until its stdin
    /// ends (<see cref="SetupIoUringProcess"/>).
    /// </summary>
    public static void ServeUntilStdinEnds()
    {
        var server = new AcceptStormBenchmarks();
        server.SetupIoUring();
        Console.WriteLine($"port {server._endPoint.Port}");
        Console.Out.Flush();
        while (Console.In.Read() >= 0)
        {
        }
        server.CleanupIoUring();
    }

    /// <summary>The server process's CPU time so far (utime + stime in /proc), or zero without one.</summary>
    public TimeSpan ServerProcessCpu
    {
        get
        {
            if (_serverProcess is not { } server)
            {
                return TimeSpan.Zero;
            }
            string stat = File.ReadAllText($"/proc/{server.Id}/stat");
            string[] fields = stat[(stat.LastIndexOf(')') + 2)..].Split(' '); // after "pid (comm) ": state is field 3
            long ticks = long.Parse(fields[11], CultureInfo.InvariantCulture) + long.Parse(fields[12], CultureInfo.InvariantCulture);
            return TimeSpan.FromSeconds(ticks / 100.0); // USER_HZ
        }
    }

    private void StartServerProcess(ProcessStartInfo start, string needs)
    {
        // Its stdin is a pipe from this process: the server stops at its end, so it cannot outlive a crash here.
        start.RedirectStandardInput = true;
        start.RedirectStandardOutput = true;
        start.RedirectStandardError = true;
        start.UseShellExecute = false;
        _serverProcess = Process.Start(start) ?? throw new InvalidOperationException($"Could not start {start.FileName}.");
        Task<string?> firstLine = _serverProcess.StandardOutput.ReadLineAsync();
        string? line = firstLine.Wait(TimeSpan.FromSeconds(10)) ? firstLine.Result : null;
        if (line is null || !line.StartsWith("port ", StringComparison.Ordinal)
            || !int.TryParse(line.AsSpan(5), NumberStyles.None, CultureInfo.InvariantCulture, out int port))
        {
            string errors = StopServerProcess();
            throw new InvalidOperationException(
                $"{start.FileName} did not print its port (first line: '{line}'; stderr: '{errors.Trim()}'). " + needs);
        }
        _endPoint = new IPEndPoint(IPAddress.Loopback, port);
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
        // What handing connections between loops can cost at most: the eventfd writes that woke a sleeping loop (a
        // hand-off's post, or any other) and the loops' system calls, per connection served.
        long served = Math.Max(1, _network.Loops.Sum(l => l.Counters.BytesReceived / MessageSize));
        Console.WriteLine($"// per connection: {(double)_network.Loops.Sum(l => l.Counters.Wakeups) / served:F3} loop wake-ups (eventfd writes), "
            + $"{(double)_network.Loops.Sum(l => l.Counters.Syscalls) / served:F3} io_uring_enter calls, "
            + $"{(double)_network.Loops.Sum(l => l.Counters.Sqes) / served:F2} SQEs, {(double)_network.Loops.Sum(l => l.Counters.Cqes) / served:F2} CQEs, "
            + $"{(double)_network.Loops.Sum(l => l.Counters.CallerSends) / served:F3} sends made by the flushing thread");
        _ioUringListener?.DisposeAsync().AsTask().GetAwaiter().GetResult();
        _network?.Dispose();
        _ = _acceptLoop.Wait(TimeSpan.FromSeconds(5));
    }

    /// <summary>Ends the C server, or the IoUring server process (<see cref="SetupIoUringProcess"/>).</summary>
    [GlobalCleanup(Target = nameof(CServer))]
    public void CleanupCServer() => _ = StopServerProcess();

    [Benchmark(Baseline = true, Description = "System.Net.Sockets accept")]
    public Task Sockets() => StormAsync();

    [Benchmark(Description = "IoUring multishot accept")]
    public Task IoUring() => StormAsync();

    [Benchmark(Description = "IoUring single-shot accept")]
    public Task IoUringSingleShot() => StormAsync();

    [Benchmark(Description = "C liburing echo server (floor)")]
    public Task CServer() => StormAsync(waitForServer: false);

    /// <summary>The storm against a server in another process (<see cref="SetupIoUringProcess"/>; the C floor's too).</summary>
    public Task ServerProcess() => StormAsync(waitForServer: false);

    private async Task StormAsync(bool waitForServer = true)
    {
        var workers = new Task[Concurrency];
        for (int w = 0; w < workers.Length; w++)
        {
            int count = Clients / Concurrency + (w < Clients % Concurrency ? 1 : 0);
            workers[w] = ClientWorkerAsync(count);
        }
        await Task.WhenAll(workers).ConfigureAwait(false);
        if (!waitForServer)
        {
            return;
        }
        Task served = _allServed.Task;
        if (await Task.WhenAny(served, Task.Delay(TimeSpan.FromSeconds(30))).ConfigureAwait(false) != served)
        {
            throw new TimeoutException($"The server closed {Volatile.Read(ref _served)} of {Clients} connections.");
        }
    }

    /// <summary>Ends the server process, the C floor or IoUring's own (the end of its stdin, then a kill if it is still there), and returns its stderr.</summary>
    private string StopServerProcess()
    {
        if (_serverProcess is not { } server)
        {
            return "";
        }
        _serverProcess = null;
        server.StandardInput.Close();
        if (!server.WaitForExit(5_000))
        {
            server.Kill();
            server.WaitForExit();
        }
        string errors = server.StandardError.ReadToEnd();
        server.Dispose();
        return errors;
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
