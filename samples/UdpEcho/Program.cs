// A UDP echo server and client on IoUring's datagram API.
//   dotnet run --project samples/UdpEcho -- server [port]                  echo every datagram to its sender; Ctrl+C stops
//   dotnet run --project samples/UdpEcho -- client [port] [text] [count]   send text count times, print each echo
using System.Net;
using System.Net.Sockets;
using System.Text;
using IoUring.Net;

string mode = args.Length > 0 ? args[0] : "server";
int port = args.Length > 1 ? int.Parse(args[1], System.Globalization.CultureInfo.InvariantCulture) : 7008;

await using var network = new IoUringNetwork();

if (mode == "server")
{
    // IPv6Any binds in dual mode: IPv4 clients are answered too (their addresses come as IPv4-mapped IPv6).
    await using IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.IPv6Any, port));
    Console.WriteLine($"UDP echo server on {socket.LocalEndPoint} ({network.Loops.Count} io_uring loops); Ctrl+C stops");
    using var stop = new CancellationTokenSource();
    Console.CancelKeyPress += (_, e) => { e.Cancel = true; stop.Cancel(); };
    // A batch hands over every datagram that arrived together; nothing is allocated per datagram.
    var batch = new UdpDatagramBatch(capacity: 16, bufferSize: IoUringUdpOptions.LargestDatagram);
    try
    {
        while (true)
        {
            int count = await socket.ReceiveBatchAsync(batch, stop.Token);
            for (int i = 0; i < count; i++)
            {
                if (batch.GetResult(i).Truncated)
                {
                    Console.WriteLine($"a datagram of {batch.GetResult(i).DatagramLength} bytes was cut: not echoed");
                    continue;
                }
                await socket.SendToAsync(batch.GetPayload(i), batch.GetAddress(i), stop.Token);
            }
        }
    }
    catch (OperationCanceledException)
    {
        Console.WriteLine($"received {socket.DatagramsReceived}, sent {socket.DatagramsSent}, dropped {socket.DatagramsDropped}");
    }
}
else
{
    string text = args.Length > 2 ? args[2] : "hello, io_uring";
    int count = args.Length > 3 ? int.Parse(args[3], System.Globalization.CultureInfo.InvariantCulture) : 1;
    await using IoUringUdpSocket socket = network.BindUdp(new IPEndPoint(IPAddress.Loopback, 0));
    socket.Connect(new IPEndPoint(IPAddress.Loopback, port)); // receives only the server's datagrams; ICMP errors reported
    byte[] payload = Encoding.UTF8.GetBytes(text);
    var reply = new byte[IoUringUdpOptions.LargestDatagram];
    for (int i = 0; i < count; i++)
    {
        await socket.SendAsync(payload);
        using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(2));
        try
        {
            DatagramResult result = await socket.ReceiveAsync(reply, timeout.Token);
            Console.WriteLine(Encoding.UTF8.GetString(reply, 0, result.BytesReceived));
        }
        catch (SocketException ex) when (ex.SocketErrorCode == SocketError.ConnectionRefused)
        {
            Console.WriteLine($"nothing listens on UDP port {port} (ICMP port unreachable)");
            return 1;
        }
        catch (OperationCanceledException)
        {
            Console.WriteLine("no answer within 2 s (datagrams may be lost)");
            return 1;
        }
    }
}
return 0;
