using System.Net.Sockets;

namespace IoUring.Benchmarks.Net;

/// <summary>The System.Net.Sockets baselines' accept loop: hands each accepted socket to a server until the listener is disposed.</summary>
internal static class SocketAcceptLoop
{
    public static async Task RunAsync(Socket listener, Action<Socket> serve)
    {
        while (true)
        {
            Socket socket;
            try
            {
                socket = await listener.AcceptAsync().ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is SocketException or ObjectDisposedException)
            {
                return;
            }
            serve(socket);
        }
    }
}
