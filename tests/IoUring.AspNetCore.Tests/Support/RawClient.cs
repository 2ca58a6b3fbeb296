using System.Net.Sockets;
using System.Text;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>Helpers for tests that speak HTTP over a raw socket.</summary>
public static class RawClient
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    public static Task SendAsync(Socket socket, string text) => socket.SendAsync(Encoding.ASCII.GetBytes(text).AsMemory()).AsTask().WaitAsync(s_hangGuard);

    /// <summary>Reads until <paramref name="done"/> holds for everything read so far (as Latin-1 text) or EOF; returns the text.</summary>
    public static async Task<string> ReceiveUntilAsync(Socket socket, Func<string, bool> done)
    {
        var text = new StringBuilder();
        byte[] buffer = new byte[1 << 16];
        while (!done(text.ToString()))
        {
            int n = await socket.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard);
            if (n == 0)
            {
                break;
            }
            text.Append(Encoding.Latin1.GetString(buffer, 0, n));
        }
        return text.ToString();
    }

    /// <summary>Reads and discards until the server ends the connection (FIN or RST); returns the byte count.</summary>
    public static async Task<long> DrainAsync(Socket socket)
    {
        byte[] buffer = new byte[1 << 16];
        long total = 0;
        try
        {
            int n;
            while ((n = await socket.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard)) > 0)
            {
                total += n;
            }
        }
        catch (SocketException)
        {
            // reset: ended too
        }
        return total;
    }

    /// <summary>Reads at least <paramref name="count"/> bytes.</summary>
    public static async Task ReceiveAtLeastAsync(Socket socket, long count)
    {
        byte[] buffer = new byte[1 << 16];
        long total = 0;
        while (total < count)
        {
            int n = await socket.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(s_hangGuard);
            Assert.True(n > 0, "the server ended the connection early");
            total += n;
        }
    }

    /// <summary>Closes with RST: SO_LINGER 0.</summary>
    public static void Reset(Socket socket)
    {
        socket.LingerState = new LingerOption(true, 0);
        socket.Close();
    }

    public static int Count(string text, string value)
    {
        int count = 0;
        for (int i = text.IndexOf(value, StringComparison.Ordinal); i >= 0; i = text.IndexOf(value, i + value.Length, StringComparison.Ordinal))
        {
            count++;
        }
        return count;
    }
}
