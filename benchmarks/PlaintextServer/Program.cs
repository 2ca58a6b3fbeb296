// A minimal HTTP/1.1 plaintext responder (TechEmpower "plaintext" without routing) for the load harness,
// benchmarks/run-plaintext.sh. The protocol logic (Plaintext.cs) is the same for both transports:
//   --transport iouring   IoUringNetwork: Input/Output pipes of IoUringConnection
//   --transport sockets   System.Net.Sockets: Socket.AcceptAsync, then a NetworkStream wrapped by
//                         PipeReader.Create / PipeWriter.Create (StreamPipeReader/StreamPipeWriter)
//   --port N (default 8080)  --loops N (io_uring loops; default 1)
//   --inline   run pipe continuations inline (IoUringNetworkOptions.UnsafePreferInlineScheduling; for sockets,
//              DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1, which must be in the environment at start)
// Prints "pid <n>" first. SIGHUP prints "alloc <bytes> gc0 <n> gc1 <n> gc2 <n> jit <methods compiled so far>", and for
// iouring the loops' counters "enter <io_uring_enter calls> wakeup <eventfd wakeups> sqe <n> cqe <n>", so the harness
// can compute them per request; SIGINT/SIGTERM stop it.
using System.Globalization;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Loops;
using IoUring.Net;
using PlaintextServer;

string transport = "iouring";
int port = 8080;
int loops = 1;
bool inline = false;
for (int i = 0; i < args.Length; i++)
{
    switch (args[i])
    {
        case "--transport": transport = args[++i]; break;
        case "--port": port = int.Parse(args[++i], CultureInfo.InvariantCulture); break;
        case "--loops": loops = int.Parse(args[++i], CultureInfo.InvariantCulture); break;
        case "--inline": inline = true; break;
        default:
            Console.Error.WriteLine($"unknown argument {args[i]}; usage: --transport iouring|sockets [--port N] [--loops N] [--inline]");
            return 2;
    }
}

Console.WriteLine($"pid {Environment.ProcessId}");
Console.Out.Flush();
Plaintext.StartDateTimer();

using var stop = new CancellationTokenSource();
using PosixSignalRegistration sigint = PosixSignalRegistration.Create(PosixSignal.SIGINT, c => { c.Cancel = true; stop.Cancel(); });
using PosixSignalRegistration sigterm = PosixSignalRegistration.Create(PosixSignal.SIGTERM, c => { c.Cancel = true; stop.Cancel(); });
using PosixSignalRegistration sighup = PosixSignalRegistration.Create(PosixSignal.SIGHUP, c =>
{
    c.Cancel = true;
    string loopCounters = "";
    if (s_network is { } network)
    {
        long enters = 0, wakeups = 0, sqes = 0, cqes = 0;
        foreach (IoUring.Loops.EventLoop loop in network.Loops)
        {
            IoUring.Loops.EventLoopCounters counters = loop.Counters;
            enters += counters.Syscalls;
            wakeups += counters.Wakeups;
            sqes += counters.Sqes;
            cqes += counters.Cqes;
        }
        loopCounters = $" enter {enters} wakeup {wakeups} sqe {sqes} cqe {cqes}";
    }
    Console.WriteLine($"alloc {GC.GetTotalAllocatedBytes(precise: true)} gc0 {GC.CollectionCount(0)} gc1 {GC.CollectionCount(1)} gc2 {GC.CollectionCount(2)} jit {System.Runtime.JitInfo.GetCompiledMethodCount()}{loopCounters}");
    Console.Out.Flush();
});

var endPoint = new IPEndPoint(IPAddress.Any, port);
switch (transport)
{
    case "iouring":
        await RunIoUringAsync(endPoint, loops, inline, stop.Token);
        break;
    case "sockets":
        if (inline && Environment.GetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS") != "1")
        {
            Console.Error.WriteLine("--inline with sockets needs DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS=1 in the environment");
            return 2;
        }
        await RunSocketsAsync(endPoint, stop.Token);
        break;
    default:
        Console.Error.WriteLine($"unknown transport {transport}: iouring or sockets");
        return 2;
}
return 0;

static async Task RunIoUringAsync(IPEndPoint endPoint, int loops, bool inline, CancellationToken stop)
{
    await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = loops, UnsafePreferInlineScheduling = inline });
    s_network = network;
    await using IoUringListener listener = network.Listen(endPoint);
    Console.WriteLine($"iouring listening on {listener.LocalEndPoint}, {loops} loop(s), inline {inline}, server GC {System.Runtime.GCSettings.IsServerGC}");
    Console.Out.Flush();
    using CancellationTokenRegistration unbindOnStop = stop.Register(() => _ = listener.UnbindAsync());
    while (await listener.AcceptAsync() is { } connection)
    {
        _ = ServeIoUringAsync(connection);
    }
}

static async Task ServeIoUringAsync(IoUringConnection connection)
{
    await Plaintext.ServeAsync(connection.Input, connection.Output);
    await connection.DisposeAsync(); // graceful: what is left, then FIN
}

static async Task RunSocketsAsync(IPEndPoint endPoint, CancellationToken stop)
{
    using var listener = new Socket(endPoint.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
    listener.Bind(endPoint);
    listener.Listen(512);
    Console.WriteLine($"sockets listening on {listener.LocalEndPoint}, inline completions {Environment.GetEnvironmentVariable("DOTNET_SYSTEM_NET_SOCKETS_INLINE_COMPLETIONS") == "1"}, server GC {System.Runtime.GCSettings.IsServerGC}");
    Console.Out.Flush();
    while (!stop.IsCancellationRequested)
    {
        Socket socket;
        try
        {
            socket = await listener.AcceptAsync(stop);
        }
        catch (OperationCanceledException)
        {
            break;
        }
        socket.NoDelay = true;
        _ = ServeSocketAsync(socket);
    }
}

static async Task ServeSocketAsync(Socket socket)
{
    var stream = new NetworkStream(socket, ownsSocket: true);
    PipeReader input = PipeReader.Create(stream, new StreamPipeReaderOptions(leaveOpen: true));
    PipeWriter output = PipeWriter.Create(stream, new StreamPipeWriterOptions(leaveOpen: true));
    await Plaintext.ServeAsync(input, output);
    await input.CompleteAsync();
    try
    {
        await output.CompleteAsync();
        socket.Shutdown(SocketShutdown.Send);
    }
    catch (Exception ex) when (ex is IOException or SocketException or ObjectDisposedException)
    {
    }
    await stream.DisposeAsync();
}

internal partial class Program
{
    private static IoUringNetwork? s_network;
}
