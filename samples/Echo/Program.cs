// An echo server and client on IoUring's plain connection API.
//   dotnet run --project samples/Echo -- server [port]          echo every byte back until the peer's FIN
//   dotnet run --project samples/Echo -- client [port] [text]   send text, print the echo
using System.Net;
using System.Text;
using IoUring.Net;

string mode = args.Length > 0 ? args[0] : "server";
int port = args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 7007;
var endPoint = new IPEndPoint(IPAddress.Loopback, port);

await using var network = new IoUringNetwork();

if (mode == "server")
{
    await using IoUringListener listener = network.Listen(endPoint);
    Console.WriteLine($"echo server on {listener.LocalEndPoint} ({network.Loops.Count} io_uring loops); Ctrl+C stops");
    Console.CancelKeyPress += (_, e) => { e.Cancel = true; _ = listener.UnbindAsync(); };
    while (await listener.AcceptAsync() is { } connection)
    {
        _ = EchoAsync(connection);
    }
}
else
{
    string text = args.Length > 2 ? args[2] : "hello, io_uring";
    await using IoUringConnection connection = await network.ConnectAsync(endPoint);
    await using Stream stream = connection.AsStream();
    await stream.WriteAsync(Encoding.UTF8.GetBytes(text));
    await connection.Output.CompleteAsync(); // FIN: the server echoes, then closes its side
    using var reader = new StreamReader(stream, Encoding.UTF8);
    Console.WriteLine(await reader.ReadToEndAsync());
}

static async Task EchoAsync(IoUringConnection connection)
{
    await using (connection)
    {
        try
        {
            await connection.Input.CopyToAsync(connection.Output);
        }
        catch (IOException)
        {
            // the peer reset the connection
        }
    }
}
