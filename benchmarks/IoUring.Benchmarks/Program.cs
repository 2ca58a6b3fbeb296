using System.Globalization;
using BenchmarkDotNet.Columns;
using BenchmarkDotNet.Configs;
using BenchmarkDotNet.Running;
using IoUring.Benchmarks.Support;

namespace IoUring.Benchmarks;

/// <summary>
/// Runs the suites chosen on the command line, e.g.
/// <c>dotnet run -c Release --project benchmarks/IoUring.Benchmarks -- --filter '*Nop*'</c>;
/// add <c>--job short</c> for a quick look (3 iterations, one launch). <c>-- --paired [rounds] [nop|bufferring|custom|echo|echo-aa|storm|storm-aa]</c> instead measures
/// each ring-core comparison (or only the one named; echo and storm only when named) interleaved in one process; <c>-- --storm-trace
/// [server] [storms]</c> times one accept-storm server's storms one after another; <c>-- --echo-counters ...</c> prints the
/// loops' work per MiB of the echo (<see cref="Net.EchoCounters"/>); <c>-- --udp-responder ...</c> the UDP responder's
/// answers per server CPU-second (<see cref="Net.UdpResponder"/>). docs/benchmarks.md has the measured numbers.
/// </summary>
public static class Program
{
    public static void Main(string[] args)
    {
        if (args.Length > 0 && args[0] == "--echo-counters")
        {
            Net.EchoCounters.Run(args[1..]);
            return;
        }
        switch (args.Length > 0 ? args[0] : null)
        {
            case "--storm-server":
                Net.AcceptStormBenchmarks.ServeUntilStdinEnds();
                return;
            case "--storm-trace":
                PairedSuites.TraceStorm(args.Length > 1 ? args[1] : "iouring", args.Length > 2 ? int.Parse(args[2], CultureInfo.InvariantCulture) : 20);
                return;
            case "--udp-responder":
                Net.UdpResponder.Run(args[1..]);
                return;
            case "--udp-server":
                Net.UdpResponder.Serve(args[1]);
                return;
            case "--udp-bulk":
                Net.UdpBulkSend.Run(args[1..]);
                return;
            case "--udp-bulk-receive":
                Net.UdpBulkReceive.Run(args[1..]);
                return;
            case "--udp-sink":
                Net.UdpBulkReceive.Sink(args[1]);
                return;
            case "--udp-drain":
                Net.UdpBulkSend.Drain();
                return;
            case "--udp-blast":
                Net.UdpBulkSend.Blast(args[1..]);
                return;
            case "--udp-load":
                Net.UdpResponder.Load(int.Parse(args[1], CultureInfo.InvariantCulture), int.Parse(args[2], CultureInfo.InvariantCulture), int.Parse(args[3], CultureInfo.InvariantCulture));
                return;
        }
        if (args.Length > 0 && args[0] == "--paired")
        {
            PairedSuites.Run(args.Length > 1 ? int.Parse(args[1], CultureInfo.InvariantCulture) : 31, args.Length > 2 ? args[2] : null);
            return;
        }
        IConfig config = DefaultConfig.Instance
            .AddColumn(StatisticColumn.Median, StatisticColumn.OperationsPerSecond);
        BenchmarkSwitcher.FromAssembly(typeof(Program).Assembly).Run(args, config);
    }
}
