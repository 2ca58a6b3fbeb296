// A YARP reverse proxy on io_uring both ways: Kestrel accepts on the io_uring transport and YARP forwards through
// HttpClient connections on io_uring (IoUringConnectionFactory.ConfigureHttpHandler).
//
//   dotnet run -c Release -- --backend http://127.0.0.1:5000 [--transport iouring|sockets] [--urls http://127.0.0.1:8080]
//
//   --backend    where every request goes (required); http:// or https://
//   --transport  sockets: both ways on Kestrel's Sockets transport and YARP's default handler, for comparison
//
//   dotnet run -c Release --project samples/KestrelSample &      # a backend on :5000
//   dotnet run -c Release --project samples/YarpProxy -- --backend http://127.0.0.1:5000
//   curl http://127.0.0.1:8080/plaintext
using YarpProxy;

WebApplication app;
try
{
    app = ProxyApp.Build(args);
}
catch (ArgumentException ex)
{
    Console.Error.WriteLine(ex.Message);
    return 2;
}
await app.StartAsync();
Console.WriteLine(ProxyApp.Describe(app));
await app.WaitForShutdownAsync();
return 0;
