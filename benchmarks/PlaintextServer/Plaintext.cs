using System.Buffers;
using System.Globalization;
using System.IO.Pipelines;
using System.Text;

namespace PlaintextServer;

/// <summary>
/// The protocol, shared literally by both transports: every request ends at CRLF CRLF (no bodies); each one,
/// pipelined ones included, gets the same TechEmpower plaintext response; one flush per batch of parsed requests.
/// Nothing here allocates per request (the response bytes are rebuilt once a second when the Date changes).
/// </summary>
public static class Plaintext
{
    private static readonly byte[] s_terminator = "\r\n\r\n"u8.ToArray();
    private static byte[] s_response = Build(DateTimeOffset.UtcNow);
    private static Timer? s_dateTimer;

    /// <summary>The current response, Date header included (RFC 1123, always 29 characters, so its length is fixed).</summary>
    public static ReadOnlySpan<byte> Response => Volatile.Read(ref s_response);

    /// <summary>Starts refreshing the Date header once a second.</summary>
    public static void StartDateTimer()
    {
        s_dateTimer ??= new Timer(static _ => Volatile.Write(ref s_response, Build(DateTimeOffset.UtcNow)), null, TimeSpan.FromSeconds(1), TimeSpan.FromSeconds(1));
    }

    private static byte[] Build(DateTimeOffset now) => Encoding.ASCII.GetBytes(
        "HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\nServer: B\r\nDate: "
        + now.ToString("r", CultureInfo.InvariantCulture) + "\r\n\r\nHello, World!");

    /// <summary>Serves one connection until the peer's FIN (or a reset, which ends it quietly).</summary>
    public static async Task ServeAsync(PipeReader input, PipeWriter output)
    {
        try
        {
            while (true)
            {
                ReadResult result = await input.ReadAsync().ConfigureAwait(false);
                ReadOnlySequence<byte> buffer = result.Buffer;
                int requests = CountRequests(ref buffer);
                input.AdvanceTo(buffer.Start, buffer.End);
                if (requests > 0)
                {
                    WriteResponses(output, requests);
                    FlushResult flush = await output.FlushAsync().ConfigureAwait(false);
                    if (flush.IsCompleted)
                    {
                        break;
                    }
                }
                if (result.IsCompleted)
                {
                    break;
                }
            }
        }
        catch (IOException)
        {
            // reset by the peer (wrk closes its connections at the end of a run)
        }
        catch (System.Net.Sockets.SocketException)
        {
        }
        catch (ObjectDisposedException)
        {
        }
    }

    /// <summary>Consumes every complete request at the start of <paramref name="buffer"/> and returns how many.</summary>
    private static int CountRequests(ref ReadOnlySequence<byte> buffer)
    {
        int count = 0;
        if (buffer.IsSingleSegment)
        {
            ReadOnlySpan<byte> span = buffer.FirstSpan;
            int consumed = 0;
            int end;
            while ((end = span[consumed..].IndexOf(s_terminator)) >= 0)
            {
                consumed += end + s_terminator.Length;
                count++;
            }
            buffer = buffer.Slice(consumed);
            return count;
        }
        var reader = new SequenceReader<byte>(buffer);
        while (reader.TryReadTo(out ReadOnlySequence<byte> _, s_terminator, advancePastDelimiter: true))
        {
            count++;
        }
        buffer = buffer.Slice(reader.Position);
        return count;
    }

    private static void WriteResponses(PipeWriter output, int count)
    {
        ReadOnlySpan<byte> response = Response;
        while (count > 0)
        {
            Span<byte> span = output.GetSpan(response.Length);
            int fit = Math.Min(count, span.Length / response.Length);
            for (int i = 0; i < fit; i++)
            {
                response.CopyTo(span[(i * response.Length)..]);
            }
            output.Advance(fit * response.Length);
            count -= fit;
        }
    }
}
