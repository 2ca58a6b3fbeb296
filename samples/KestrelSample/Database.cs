using System.Globalization;
using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json.Serialization;
using System.Text.Unicode;
using Npgsql;

/// <summary>
/// The sample's --db option: TechEmpower's database endpoints (/db, /queries, /fortunes, /updates) on PostgreSQL
/// through Npgsql, raw ADO.NET over one pooled NpgsqlDataSource, against TechEmpower's hello_world database
/// (benchmarks/db/postgres.sh makes one).
/// </summary>
internal static class Database
{
    private const string AddedFortune = "Additional fortune added at request time.";

    // Leaves non-ASCII text (the Japanese fortune) as UTF-8; encodes what HTML needs: <, >, &, quotes.
    private static readonly HtmlEncoder s_html = HtmlEncoder.Create(UnicodeRanges.All);

    /// <summary>
    /// Maps the endpoints on <paramref name="connectionString"/>'s database after one connection proved it reachable
    /// (a wrong string or a stopped server fails the start, not every request); returns an error message, or null.
    /// </summary>
    public static async Task<string?> MapAsync(WebApplication app, string connectionString)
    {
        NpgsqlDataSource dataSource;
        try
        {
            dataSource = NpgsqlDataSource.Create(connectionString);
        }
        catch (ArgumentException ex)
        {
            return $"--db: not an Npgsql connection string: {ex.Message}";
        }
        try
        {
            await using NpgsqlConnection connection = await dataSource.OpenConnectionAsync();
        }
        catch (Exception ex) when (ex is NpgsqlException or InvalidOperationException)
        {
            await dataSource.DisposeAsync();
            return $"--db: cannot connect to the database: {ex.Message}";
        }
        app.Lifetime.ApplicationStopped.Register(dataSource.Dispose);

        app.MapGet("/db", async () => Results.Json(await ReadRowAsync(dataSource), DatabaseJsonContext.Default.World));

        // IResult spelled out: a lambda taking HttpContext and returning a bare Task would bind to RequestDelegate and
        // drop the result.
        app.MapGet("/queries", async Task<IResult> (HttpContext context) =>
            Results.Json(await QueriesAsync(dataSource, Count(context)), DatabaseJsonContext.Default.WorldArray));

        app.MapGet("/fortunes", async () =>
            Results.Text(await FortunesHtmlAsync(dataSource), "text/html; charset=utf-8"));

        app.MapGet("/updates", async Task<IResult> (HttpContext context) =>
            Results.Json(await UpdatesAsync(dataSource, Count(context)), DatabaseJsonContext.Default.WorldArray));
        return null;
    }

    // The endpoints' work without HTTP: benchmarks/DbFloor runs these to measure what the application costs alone.

    internal static async Task<World[]> QueriesAsync(NpgsqlDataSource dataSource, int count)
    {
        var worlds = new World[count];
        await using NpgsqlConnection connection = await dataSource.OpenConnectionAsync();
        for (int i = 0; i < count; i++)
        {
            worlds[i] = await ReadRowAsync(connection, Random.Shared.Next(1, 10001));
        }
        return worlds;
    }

    internal static async Task<string> FortunesHtmlAsync(NpgsqlDataSource dataSource)
    {
        var fortunes = new List<Fortune>(16);
        await using (NpgsqlCommand command = dataSource.CreateCommand("SELECT id, message FROM fortune"))
        await using (NpgsqlDataReader reader = await command.ExecuteReaderAsync())
        {
            while (await reader.ReadAsync())
            {
                fortunes.Add(new Fortune(reader.GetInt32(0), reader.GetString(1)));
            }
        }
        fortunes.Add(new Fortune(0, AddedFortune));
        fortunes.Sort((a, b) => string.CompareOrdinal(a.Message, b.Message));
        var html = new StringBuilder("<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table><tr><th>id</th><th>message</th></tr>");
        foreach (Fortune fortune in fortunes)
        {
            html.Append("<tr><td>").Append(fortune.Id.ToString(CultureInfo.InvariantCulture)).Append("</td><td>")
                .Append(s_html.Encode(fortune.Message)).Append("</td></tr>");
        }
        html.Append("</table></body></html>");
        return html.ToString();
    }

    internal static async Task<World[]> UpdatesAsync(NpgsqlDataSource dataSource, int count)
    {
        // Distinct rows, updated in id order: two requests' updates then lock rows in the same order, never
        // deadlocking, and each returned number is what the row holds afterwards.
        var ids = new HashSet<int>(count);
        while (ids.Count < count)
        {
            ids.Add(Random.Shared.Next(1, 10001));
        }
        var worlds = new World[count];
        await using NpgsqlConnection connection = await dataSource.OpenConnectionAsync();
        int i = 0;
        foreach (int id in ids)
        {
            World world = await ReadRowAsync(connection, id);
            int number = Random.Shared.Next(1, 10000);
            world.RandomNumber = number >= world.RandomNumber ? number + 1 : number; // never the number it had
            worlds[i++] = world;
        }
        World[] sorted = [.. worlds.OrderBy(w => w.Id)];
        await using NpgsqlCommand update = new(
            "UPDATE world SET randomnumber = u.r FROM unnest($1::integer[], $2::integer[]) AS u(id, r) WHERE world.id = u.id", connection);
        update.Parameters.Add(new NpgsqlParameter<int[]> { TypedValue = [.. sorted.Select(w => w.Id)] });
        update.Parameters.Add(new NpgsqlParameter<int[]> { TypedValue = [.. sorted.Select(w => w.RandomNumber)] });
        await update.ExecuteNonQueryAsync();
        return worlds;
    }

    /// <summary>TechEmpower's queries parameter: 1 to 500, 1 when absent or not a number.</summary>
    private static int Count(HttpContext context) =>
        int.TryParse(context.Request.Query["queries"], NumberStyles.Integer, CultureInfo.InvariantCulture, out int n) ? Math.Clamp(n, 1, 500) : 1;

    internal static async Task<World> ReadRowAsync(NpgsqlDataSource dataSource)
    {
        await using NpgsqlConnection connection = await dataSource.OpenConnectionAsync();
        return await ReadRowAsync(connection, Random.Shared.Next(1, 10001));
    }

    private static async Task<World> ReadRowAsync(NpgsqlConnection connection, int id)
    {
        await using NpgsqlCommand command = new("SELECT id, randomnumber FROM world WHERE id = $1", connection);
        command.Parameters.Add(new NpgsqlParameter<int> { TypedValue = id });
        await using NpgsqlDataReader reader = await command.ExecuteReaderAsync();
        if (!await reader.ReadAsync())
        {
            throw new InvalidOperationException($"world has no row {id}: is this TechEmpower's hello_world database?");
        }
        return new World { Id = reader.GetInt32(0), RandomNumber = reader.GetInt32(1) };
    }
}

internal sealed class World
{
    [JsonPropertyName("id")]
    public int Id { get; set; }

    [JsonPropertyName("randomNumber")]
    public int RandomNumber { get; set; }
}

internal sealed record Fortune(int Id, string Message);

[JsonSerializable(typeof(World))]
[JsonSerializable(typeof(World[]))]
internal sealed partial class DatabaseJsonContext : JsonSerializerContext;
