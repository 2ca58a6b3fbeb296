using System.Buffers;
using System.IO.Pipelines;
using System.Runtime.CompilerServices;

namespace IoUring.Net;

/// <summary>
/// How many bytes a <see cref="Pipe"/> holds that its reader has not examined yet: the figure the pipe compares with
/// its pause threshold (<see cref="PipeOptions.PauseWriterThreshold"/>). A receiver that knows it can arm a capped
/// multishot RECV for exactly what the pipe can still take before it pauses.
/// </summary>
/// <remarks>
/// System.IO.Pipelines keeps this count in an internal property (<c>Pipe.Length</c>, the private <c>_unconsumedBytes</c>
/// that its own tests read) and publishes no API for it. It is read here through <see cref="UnsafeAccessorAttribute"/>:
/// no wrapper around the application's reads, no cost on its path. Because that member is not a contract, it is checked
/// once per process against the pipe's behaviour (<see cref="IsAvailable"/>); when it is missing or disagrees, receivers
/// do without it (backpressure then relies on cancelling the receive alone, as on kernels without the receive cap).
/// The read is a plain load of a long the reader updates under the pipe's lock: a recent value, which is all a cap needs.
/// </remarks>
internal static class PipeBacklog
{
    [UnsafeAccessor(UnsafeAccessorKind.Method, Name = "get_Length")]
    private static extern long GetLength(Pipe pipe);

    /// <summary>True when <see cref="Of"/> reads the pipe's own count (checked once per process).</summary>
    public static bool IsAvailable { get; } = Environment.Is64BitProcess && Check(); // a long read in one load

    /// <summary>Bytes flushed into <paramref name="pipe"/> and not yet examined by its reader. Only when <see cref="IsAvailable"/>.</summary>
    public static long Of(Pipe pipe) => GetLength(pipe);

    // Written, flushed, partly examined, then all of it: the count must follow each step as the pause logic sees it.
    private static bool Check()
    {
        try
        {
            var pipe = new Pipe(new PipeOptions(pauseWriterThreshold: 0, useSynchronizationContext: false));
            pipe.Writer.Write(new byte[10]);
            if (GetLength(pipe) != 0 || !pipe.Writer.FlushAsync().IsCompletedSuccessfully || GetLength(pipe) != 10)
            {
                return false;
            }
            if (!pipe.Reader.TryRead(out ReadResult read))
            {
                return false;
            }
            pipe.Reader.AdvanceTo(read.Buffer.GetPosition(3), read.Buffer.GetPosition(4));
            bool partly = GetLength(pipe) == 6;
            pipe.Reader.TryRead(out read);
            pipe.Reader.AdvanceTo(read.Buffer.End);
            bool all = GetLength(pipe) == 0;
            pipe.Writer.Complete();
            pipe.Reader.Complete();
            return partly && all;
        }
        catch (Exception)
        {
            return false; // MissingMethodException: this System.IO.Pipelines has no such member; anything else: do without
        }
    }
}
