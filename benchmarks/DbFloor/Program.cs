// The application's floor for the database scenarios: the Kestrel sample's own endpoint code (Database.cs) run by
// CONCURRENCY loops in this process, with no HTTP and no transport, and the result serialized as the endpoint's is.
// Requests per CPU-second here bound what any transport can reach: a server's cost per request minus this one's is
// what its transport (and Kestrel's HTTP) costs in the mix. benchmarks/db/floor.sh runs it beside the two servers.
//
//   DbFloor CONNECTION_STRING SCENARIO CONCURRENCY     SCENARIO: db, queries, fortunes or updates
//
// Then reads window lengths in seconds from stdin, one per line, runs each and prints "operations cpu_ms".
using System.Diagnostics;
using System.Text;
using System.Text.Json;
using Npgsql;

if (args.Length != 3 || !int.TryParse(args[2], out int concurrency) || concurrency < 1)
{
    Console.Error.WriteLine("usage: DbFloor CONNECTION_STRING db|queries|fortunes|updates CONCURRENCY");
    return 2;
}
await using NpgsqlDataSource dataSource = NpgsqlDataSource.Create(args[0]);
Func<Task<int>> operation = args[1] switch
{
    "db" => async () => JsonSerializer.SerializeToUtf8Bytes(
        await Database.ReadRowAsync(dataSource), DatabaseJsonContext.Default.World).Length,
    "queries" => async () => JsonSerializer.SerializeToUtf8Bytes(
        await Database.QueriesAsync(dataSource, 20), DatabaseJsonContext.Default.WorldArray).Length,
    "updates" => async () => JsonSerializer.SerializeToUtf8Bytes(
        await Database.UpdatesAsync(dataSource, 20), DatabaseJsonContext.Default.WorldArray).Length,
    "fortunes" => async () => Encoding.UTF8.GetByteCount(await Database.FortunesHtmlAsync(dataSource)),
    _ => null!,
};
if (operation is null)
{
    Console.Error.WriteLine($"unknown scenario '{args[1]}': db, queries, fortunes or updates");
    return 2;
}

while (Console.ReadLine() is { } line && double.TryParse(line, out double seconds))
{
    long deadline = Stopwatch.GetTimestamp() + (long)(seconds * Stopwatch.Frequency);
    TimeSpan cpuBefore = Process.GetCurrentProcess().TotalProcessorTime;
    var loops = new Task<long>[concurrency];
    for (int i = 0; i < concurrency; i++)
    {
        loops[i] = Task.Run(async () =>
        {
            long done = 0;
            while (Stopwatch.GetTimestamp() < deadline)
            {
                await operation();
                done++;
            }
            return done;
        });
    }
    long operations = (await Task.WhenAll(loops)).Sum();
    TimeSpan cpu = Process.GetCurrentProcess().TotalProcessorTime - cpuBefore;
    Console.WriteLine($"{operations} {(long)cpu.TotalMilliseconds}");
}
return 0;
