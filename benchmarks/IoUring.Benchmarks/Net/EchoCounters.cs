using System.Buffers;
using System.Diagnostics;
using System.Globalization;
using System.IO.Pipelines;
using System.Net;
using IoUring.Loops;
using IoUring.Net;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// The loops' work per MiB received during <see cref="EchoBenchmarks"/>' IoUring echo (the same server and clients in
/// one process): completions, buffer-ring exhaustions (ENOBUFS), io_uring_enter calls, SQEs and wake-ups, from the
/// loops' counters over 30 measured rounds after 20 warm-up rounds, and the time per round. Run with
/// <c>-- --echo-counters [message bytes] [connections] [ring buffers] [buffer bytes] [measured rounds]</c> (defaults 1 MiB,
/// 64, 512, 8192, 30; more rounds give a profiler time to attach past the warm-up).
/// </summary>
public static class EchoCounters
{
    private const int WarmupRounds = 20;

    public static void Run(string[] args)
    {
        int Arg(int index, int fallback) => args.Length > index ? int.Parse(args[index], CultureInfo.InvariantCulture) : fallback;
        int size = Arg(0, 1 << 20), connections = Arg(1, 64), bufferCount = Arg(2, 512), bufferSize = Arg(3, 8192), rounds = Arg(4, 30);
        RunAsync(size, connections, bufferCount, bufferSize, rounds).GetAwaiter().GetResult();
    }

    private static async Task RunAsync(int size, int connections, int bufferCount, int bufferSize, int rounds)
    {
        // IOURING_NO_CALLER_SENDS=1: every send through the ring (the test seam), to compare with sends from flushing threads.
        // ECHO_SERVER=copyto: the server echoes with Input.CopyToAsync(Output), as the BenchmarkDotNet echo's does.
        // ECHO_BLOCKING=1: rounds driven by one blocking thread, as BenchmarkDotNet drives them.
        bool noCallerSends = Environment.GetEnvironmentVariable("IOURING_NO_CALLER_SENDS") == "1";
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            Loop = { BufferCount = bufferCount, BufferSize = bufferSize, Hooks = noCallerSends ? new() { NoCallerSends = true } : null },
        });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = Task.Run(async () =>
        {
            while (await listener.AcceptAsync().ConfigureAwait(false) is { } connection)
            {
                _ = ServeAsync(connection);
            }
        });
        var clients = new IoUringConnection[connections];
        for (int i = 0; i < connections; i++)
        {
            clients[i] = await network.ConnectAsync(listener.LocalEndPoint).ConfigureAwait(false);
        }
        byte[] message = new byte[size];
        for (int i = 0; i < WarmupRounds; i++)
        {
            await RoundAsync(clients, message).ConfigureAwait(false);
        }
        EventLoopCounters before = Sum(network);
        long allocatedBefore = GC.GetTotalAllocatedBytes(precise: true);
        var clock = Stopwatch.StartNew();
        if (Environment.GetEnvironmentVariable("ECHO_BLOCKING") == "1")
        {
            // As BenchmarkDotNet drives the echo: a thread of its own starts each round (its flush sends) and blocks on it.
            var driver = new Thread(() =>
            {
                for (int i = 0; i < rounds; i++)
                {
                    RoundAsync(clients, message).GetAwaiter().GetResult();
                }
            });
            driver.Start();
            driver.Join();
        }
        else
        {
            for (int i = 0; i < rounds; i++)
            {
                await RoundAsync(clients, message).ConfigureAwait(false);
            }
        }
        clock.Stop();
        long allocated = GC.GetTotalAllocatedBytes(precise: true) - allocatedBefore;
        EventLoopCounters after = Sum(network);
        double mib = (double)(after.BytesReceived - before.BytesReceived) / (1 << 20); // the server's and the clients'
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"echo {size} B x {connections}, ring {bufferCount} x {bufferSize} B: {clock.Elapsed.TotalMicroseconds / rounds:F1} us per round; " +
            $"per MiB received: CQEs {(after.Cqes - before.Cqes) / mib:F1}, ENOBUFS {(after.BufferRingExhaustions - before.BufferRingExhaustions) / mib:F2}, " +
            $"enters {(after.Syscalls - before.Syscalls) / mib:F2}, SQEs {(after.Sqes - before.Sqes) / mib:F1}, wake-ups {(after.Wakeups - before.Wakeups) / mib:F2}, " +
            $"caller sends {(after.CallerSends - before.CallerSends) / mib:F1}; allocated {allocated / rounds} B per round"));
        foreach (IoUringConnection client in clients)
        {
            client.Abort();
        }
    }

    private static EventLoopCounters Sum(IoUringNetwork network)
        => network.Loops.Aggregate(default(EventLoopCounters), (sum, loop) => sum + loop.Counters);

    private static Task RoundAsync(IoUringConnection[] clients, byte[] message)
        => Task.WhenAll(clients.Select(async client =>
        {
            Task read = ReadExactlyAsync(client.Input, message.Length);
            await client.Output.WriteAsync(message).ConfigureAwait(false);
            await read.ConfigureAwait(false);
        }));

    private static async Task ReadExactlyAsync(PipeReader input, long count)
    {
        while (count > 0)
        {
            ReadResult result = await input.ReadAsync().ConfigureAwait(false);
            long take = Math.Min(count, result.Buffer.Length);
            input.AdvanceTo(result.Buffer.GetPosition(take));
            count -= take;
            if (result.IsCompleted && count > 0)
            {
                throw new InvalidOperationException("The echo ended early.");
            }
        }
    }

    private static async Task ServeAsync(IoUringConnection connection)
    {
        if (Environment.GetEnvironmentVariable("ECHO_SERVER") == "copyto")
        {
            // The BenchmarkDotNet echo's server: the pipe API's own echo.
            try
            {
                await connection.Input.CopyToAsync(connection.Output).ConfigureAwait(false);
            }
            catch (IOException)
            {
            }
            await connection.DisposeAsync().ConfigureAwait(false);
            return;
        }
        try
        {
            while (true)
            {
                ReadResult result = await connection.Input.ReadAsync().ConfigureAwait(false);
                foreach (ReadOnlyMemory<byte> segment in result.Buffer)
                {
                    connection.Output.Write(segment.Span);
                }
                connection.Input.AdvanceTo(result.Buffer.End);
                await connection.Output.FlushAsync().ConfigureAwait(false);
                if (result.IsCompleted)
                {
                    break;
                }
            }
        }
        catch (IOException)
        {
            // the client aborted at the end
        }
        await connection.DisposeAsync().ConfigureAwait(false);
    }
}
