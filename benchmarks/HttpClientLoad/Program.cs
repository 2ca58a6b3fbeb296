// HttpClient as a load generator, on io_uring (SocketsHttpHandler.UseIoUring) and on its default sockets, in one
// process: both clients warm up, then measured windows alternate between them (io_uring, sockets, sockets, io_uring,
// ...), each window's process CPU (all threads) and responses counted. Requests per client CPU-second is the figure;
// the idle client's threads sleep (its loop in io_uring_enter, the sockets' epoll thread in epoll_wait) meanwhile.
//
//   dotnet run -c Release -- --url http://127.0.0.1:5000/plaintext [--connections 64] [--warmup 30] [--window 10]
//                            [--rounds 6] [--http2]
//
// Output: one tab-separated line per window (round, client, seconds, responses, cpu_s, responses per CPU-second,
// errors), then a summary line per client.
using System.Diagnostics;
using System.Globalization;
using System.Net;
using IoUring.Net;

var options = Options.Parse(args);
await using var network = new IoUringNetwork();
var clients = new (string Name, HttpClient Client)[]
{
    ("iouring", Create(new SocketsHttpHandler().UseIoUring(network), options)),
    ("sockets", Create(new SocketsHttpHandler(), options)),
};

foreach ((string name, HttpClient client) in clients)
{
    Console.Error.WriteLine($"warming up {name} for {options.Warmup} s");
    await RunAsync(client, options, TimeSpan.FromSeconds(options.Warmup));
}

Console.WriteLine("round\tclient\tseconds\tresponses\tcpu_s\tper_cpu_s\terrors");
var perCpu = clients.ToDictionary(c => c.Name, _ => new List<double>());
for (int round = 1; round <= options.Rounds; round++)
{
    // ABBA: each client goes first every other round.
    var order = round % 2 == 1 ? clients : clients.Reverse().ToArray();
    foreach ((string name, HttpClient client) in order)
    {
        TimeSpan cpu0 = Process.GetCurrentProcess().TotalProcessorTime;
        var clock = Stopwatch.StartNew();
        (long responses, long errors) = await RunAsync(client, options, TimeSpan.FromSeconds(options.Window));
        double seconds = clock.Elapsed.TotalSeconds;
        double cpu = (Process.GetCurrentProcess().TotalProcessorTime - cpu0).TotalSeconds;
        perCpu[name].Add(responses / cpu);
        Console.WriteLine(string.Join('\t', round, name, F(seconds), responses, F(cpu), F(responses / cpu), errors));
    }
}
foreach ((string name, List<double> values) in perCpu)
{
    values.Sort();
    Console.WriteLine($"# {name}: median {F(values[values.Count / 2])} responses per CPU-second over {values.Count} windows ({F(values[0])}..{F(values[^1])})");
}
return 0;

static HttpClient Create(SocketsHttpHandler handler, Options options)
{
    handler.MaxConnectionsPerServer = options.Connections;
    handler.PooledConnectionIdleTimeout = TimeSpan.FromMinutes(10); // no reconnects between windows
    return new HttpClient(handler)
    {
        DefaultRequestVersion = options.Http2 ? HttpVersion.Version20 : HttpVersion.Version11,
        DefaultVersionPolicy = HttpVersionPolicy.RequestVersionExact,
    };
}

// `connections` workers, each one request at a time, until the window ends.
static async Task<(long Responses, long Errors)> RunAsync(HttpClient client, Options options, TimeSpan length)
{
    long responses = 0, errors = 0;
    long end = Stopwatch.GetTimestamp() + (long)(length.TotalSeconds * Stopwatch.Frequency);
    var workers = Enumerable.Range(0, options.Connections).Select(_ => Task.Run(async () =>
    {
        byte[] buffer = new byte[16 * 1024];
        while (Stopwatch.GetTimestamp() < end)
        {
            try
            {
                using HttpResponseMessage response = await client.GetAsync(options.Url, HttpCompletionOption.ResponseHeadersRead);
                await using Stream body = await response.Content.ReadAsStreamAsync();
                while (await body.ReadAsync(buffer) > 0)
                {
                }
                Interlocked.Increment(ref response.IsSuccessStatusCode ? ref responses : ref errors);
            }
            catch (HttpRequestException)
            {
                Interlocked.Increment(ref errors);
            }
        }
    }));
    await Task.WhenAll(workers);
    return (responses, errors);
}

static string F(double value) => value.ToString("0.###", CultureInfo.InvariantCulture);

sealed record Options(Uri Url, int Connections, int Warmup, int Window, int Rounds, bool Http2)
{
    public static Options Parse(string[] args)
    {
        string Value(string name, string fallback)
        {
            int i = Array.IndexOf(args, name);
            return i >= 0 && i + 1 < args.Length ? args[i + 1] : fallback;
        }
        return new Options(
            new Uri(Value("--url", "http://127.0.0.1:5000/plaintext")),
            int.Parse(Value("--connections", "64"), CultureInfo.InvariantCulture),
            int.Parse(Value("--warmup", "30"), CultureInfo.InvariantCulture),
            int.Parse(Value("--window", "10"), CultureInfo.InvariantCulture),
            int.Parse(Value("--rounds", "6"), CultureInfo.InvariantCulture),
            args.Contains("--http2"));
    }
}
