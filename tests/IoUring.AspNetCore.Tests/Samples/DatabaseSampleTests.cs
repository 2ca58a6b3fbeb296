using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text.Json;
using System.Text.RegularExpressions;
using IoUring.AspNetCore.Tests.Reliability;
using Npgsql;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Samples;

/// <summary>
/// samples/KestrelSample with --db on io_uring against a real PostgreSQL (benchmarks/db/postgres.sh, a cluster of the
/// test's own): TechEmpower's endpoints answer with the database's rows, fortunes sorted and HTML-encoded, and updates
/// change exactly the rows they return, as read back from the database.
/// </summary>
public sealed partial class DatabaseSampleTests(LauncherFixture launcher, PostgresFixture postgres, ITestOutputHelper output)
    : IClassFixture<LauncherFixture>, IClassFixture<PostgresFixture>
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task Techempower_endpoints_serve_the_databases_rows_on_io_uring()
    {
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, ["--lifetime", "300"], RepoFiles.Sample("KestrelSample"),
            ["--urls", "http://127.0.0.1:0", "--db", postgres.ConnectionString]);
        int port = await child.WaitForKestrelPortAsync(s_hangGuard);
        Assert.Equal("Transport: io_uring", await child.WaitForLineAsync(l => l.StartsWith("Transport:", StringComparison.Ordinal), s_hangGuard));
        using var client = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{port}/"), Timeout = s_hangGuard };
        await using NpgsqlDataSource database = NpgsqlDataSource.Create(postgres.ConnectionString);

        // /db and /queries: rows as the database holds them (nothing writes while they run).
        Dictionary<int, int> world = await ReadWorldAsync(database);
        Assert.Equal(10_000, world.Count);
        (int Id, int Number) single = Assert.Single(Rows(JsonDocument.Parse(await client.GetStringAsync("db")).RootElement, array: false));
        Assert.Equal(world[single.Id], single.Number);
        foreach ((string query, int count) in new[] { ("20", 20), ("0", 1), ("abc", 1), ("501", 500) })
        {
            List<(int Id, int Number)> rows = await GetRowsAsync(client, $"queries?queries={query}");
            Assert.Equal(count, rows.Count);
            Assert.All(rows, r => Assert.Equal(world[r.Id], r.Number));
        }
        Assert.Single(await GetRowsAsync(client, "queries"));

        // /fortunes: the table's 12 rows and the added one, sorted by message, HTML-encoded, UTF-8.
        using HttpResponseMessage fortunes = await client.GetAsync("fortunes");
        Assert.Equal(HttpStatusCode.OK, fortunes.StatusCode);
        Assert.Equal("text/html; charset=utf-8", fortunes.Content.Headers.ContentType!.ToString());
        string html = await fortunes.Content.ReadAsStringAsync();
        Assert.Contains("&lt;script&gt;alert(", html, StringComparison.Ordinal);
        Assert.DoesNotContain("<script>", html, StringComparison.Ordinal);
        Assert.Contains("<td>12</td><td>フレームワークのベンチマーク</td>", html, StringComparison.Ordinal);
        List<(int Id, string Message)> expected = [(0, "Additional fortune added at request time.")];
        await using (NpgsqlCommand command = database.CreateCommand("SELECT id, message FROM fortune"))
        await using (NpgsqlDataReader reader = await command.ExecuteReaderAsync())
        {
            while (await reader.ReadAsync())
            {
                expected.Add((reader.GetInt32(0), reader.GetString(1)));
            }
        }
        Assert.Equal(13, expected.Count);
        expected.Sort((a, b) => string.CompareOrdinal(a.Message, b.Message));
        List<(int, string)> served = [.. FortuneRow().Matches(html).Select(m => (int.Parse(m.Groups[1].Value, CultureInfo.InvariantCulture), WebUtility.HtmlDecode(m.Groups[2].Value)))];
        Assert.Equal(expected, served);
        Assert.StartsWith("<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>", html, StringComparison.Ordinal);
        Assert.EndsWith("</table></body></html>", html, StringComparison.Ordinal);

        // /updates: 20 distinct rows, each with a new number, and exactly those rows changed in the database.
        List<(int Id, int Number)> updated = await GetRowsAsync(client, "updates?queries=20");
        Assert.Equal(20, updated.Select(r => r.Id).Distinct().Count());
        Dictionary<int, int> after = await ReadWorldAsync(database);
        Assert.All(updated, r =>
        {
            Assert.NotEqual(world[r.Id], r.Number);
            Assert.Equal(r.Number, after[r.Id]);
        });
        Assert.Equal(20, world.Count(row => after[row.Key] != row.Value));

        output.WriteLine(child.Output);
        Assert.DoesNotContain(child.Lines, l => l.StartsWith("fail:", StringComparison.Ordinal));
    }

    [Fact]
    public async Task A_database_it_cannot_reach_fails_the_start_saying_so()
    {
        var unreachable = new NpgsqlConnectionStringBuilder(postgres.ConnectionString) { Port = PostgresFixture.FreePort() };
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, ["--lifetime", "300"], RepoFiles.Sample("KestrelSample"),
            ["--urls", "http://127.0.0.1:0", "--db", unreachable.ConnectionString]);

        Assert.Equal(2, await child.WaitForExitAsync(s_hangGuard));
        output.WriteLine(child.Output);
        Assert.Contains(child.Lines, l => l.StartsWith("--db: cannot connect to the database:", StringComparison.Ordinal));
    }

    private static async Task<List<(int Id, int Number)>> GetRowsAsync(HttpClient client, string path)
    {
        using HttpResponseMessage response = await client.GetAsync(path);
        Assert.Equal(HttpStatusCode.OK, response.StatusCode);
        Assert.Equal("application/json", response.Content.Headers.ContentType!.MediaType);
        return Rows(JsonDocument.Parse(await response.Content.ReadAsStringAsync()).RootElement, array: true);
    }

    [Fact]
    public async Task The_floor_tool_runs_the_samples_endpoint_code_and_counts_it()
    {
        // benchmarks/DbFloor: windows read from stdin, one "operations cpu_ms" line each, on the sample's own code.
        string project = RepoFiles.Find("benchmarks/DbFloor/DbFloor.csproj");
        string dll = Path.Combine(Path.GetDirectoryName(project)!, "bin", RepoFiles.Configuration, RepoFiles.TargetFramework, "DbFloor.dll");
        (int exit, string output) = await ChildProcess.RunAsync("dotnet", [dll, postgres.ConnectionString, "fortunes", "4"], s_hangGuard,
            input: "0.5\n0.5\n");
        Assert.Equal(0, exit);
        string[] windows = output.Split('\n', StringSplitOptions.RemoveEmptyEntries);
        Assert.Equal(2, windows.Length);
        Assert.All(windows, window =>
        {
            long[] numbers = [.. window.Split(' ').Select(n => long.Parse(n, CultureInfo.InvariantCulture))];
            Assert.Equal(2, numbers.Length);
            Assert.True(numbers[0] > 0 && numbers[1] > 0, $"a window did no work: '{window}'");
        });

        (exit, output) = await ChildProcess.RunAsync("dotnet", [dll, postgres.ConnectionString, "fortune", "4"], s_hangGuard, input: "");
        Assert.Equal(2, exit);
        Assert.Contains("unknown scenario 'fortune'", output, StringComparison.Ordinal);
    }

    /// <summary>TechEmpower's world rows, {"id":..,"randomNumber":..} with nothing else, alone or in an array.</summary>
    private static List<(int Id, int Number)> Rows(JsonElement json, bool array)
    {
        Assert.Equal(array ? JsonValueKind.Array : JsonValueKind.Object, json.ValueKind);
        return [.. (array ? json.EnumerateArray() : new[] { json }.AsEnumerable()).Select(row =>
        {
            Assert.Equal(new[] { "id", "randomNumber" }, row.EnumerateObject().Select(p => p.Name));
            int id = row.GetProperty("id").GetInt32(), number = row.GetProperty("randomNumber").GetInt32();
            Assert.InRange(id, 1, 10_000);
            Assert.InRange(number, 1, 10_000);
            return (id, number);
        })];
    }

    private static async Task<Dictionary<int, int>> ReadWorldAsync(NpgsqlDataSource database)
    {
        var rows = new Dictionary<int, int>();
        await using NpgsqlCommand command = database.CreateCommand("SELECT id, randomnumber FROM world");
        await using NpgsqlDataReader reader = await command.ExecuteReaderAsync();
        while (await reader.ReadAsync())
        {
            rows.Add(reader.GetInt32(0), reader.GetInt32(1));
        }
        return rows;
    }

    [GeneratedRegex("<tr><td>([0-9]+)</td><td>(.*?)</td></tr>")]
    private static partial Regex FortuneRow();
}

/// <summary>
/// A PostgreSQL cluster of the test class's own, made, seeded and started by benchmarks/db/postgres.sh (which installs
/// Debian's postgresql if missing; .ci/run installs it first) in a new directory on a free port, deleted afterwards.
/// </summary>
public sealed class PostgresFixture : IAsyncLifetime
{
    private readonly Dictionary<string, string?> _environment = new()
    {
        ["DB_DIR"] = Path.Combine(Path.GetTempPath(), "iouring-test-postgres-" + Guid.NewGuid().ToString("N")[..12]),
        ["DB_PORT"] = FreePort().ToString(CultureInfo.InvariantCulture),
        ["DB_POOL"] = "8",
    };
    private string? _connectionString;
    private string _error = "not started";

    /// <summary>The sample's --db; if the script failed, every test that needs it fails with its output.</summary>
    public string ConnectionString => _connectionString ?? throw new InvalidOperationException("benchmarks/db/postgres.sh start failed:\n" + _error);

    public async Task InitializeAsync()
    {
        (int exitCode, string text) = await RunAsync("start", TimeSpan.FromMinutes(5)); // a fresh machine may install the package
        string? printed = text.Split('\n').LastOrDefault(l => l.StartsWith("Host=127.0.0.1;", StringComparison.Ordinal));
        if (exitCode == 0 && printed is not null)
        {
            _connectionString = printed;
        }
        else
        {
            _error = $"exit code {exitCode}:\n{text}";
        }
    }

    public async Task DisposeAsync() => await RunAsync("destroy", TimeSpan.FromMinutes(1));

    private Task<(int ExitCode, string Output)> RunAsync(string command, TimeSpan timeout) =>
        ChildProcess.RunAsync("bash", [RepoFiles.Find("benchmarks/db/postgres.sh"), command], timeout, environment: _environment);

    /// <summary>A loopback port nothing listens on right now.</summary>
    public static int FreePort()
    {
        using var listener = new TcpListener(IPAddress.Loopback, 0);
        listener.Start();
        return ((IPEndPoint)listener.LocalEndpoint).Port;
    }
}
