using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Internal;

// Events Kestrel's Sockets transport also logs keep its id, level and name, so filters keep working; ours start at 100.
internal static partial class IoUringTransportLog
{
    public const string Category = "IoUring.AspNetCore.Transport";

    [LoggerMessage(4, LogLevel.Debug, @"Connection id ""{ConnectionId}"" paused.",
        EventName = "ConnectionPause", SkipEnabledCheck = true)]
    private static partial void ConnectionPauseCore(ILogger logger, string connectionId);

    public static void ConnectionPause(ILogger logger, string connectionId)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionPauseCore(logger, connectionId);
        }
    }

    [LoggerMessage(5, LogLevel.Debug, @"Connection id ""{ConnectionId}"" resumed.",
        EventName = "ConnectionResume", SkipEnabledCheck = true)]
    private static partial void ConnectionResumeCore(ILogger logger, string connectionId);

    public static void ConnectionResume(ILogger logger, string connectionId)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionResumeCore(logger, connectionId);
        }
    }

    [LoggerMessage(6, LogLevel.Debug, @"Connection id ""{ConnectionId}"" received FIN.",
        EventName = "ConnectionReadFin", SkipEnabledCheck = true)]
    private static partial void ConnectionReadFinCore(ILogger logger, string connectionId);

    public static void ConnectionReadFin(ILogger logger, string connectionId)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionReadFinCore(logger, connectionId);
        }
    }

    [LoggerMessage(7, LogLevel.Debug, @"Connection id ""{ConnectionId}"" sending FIN because: ""{Reason}""",
        EventName = "ConnectionWriteFin", SkipEnabledCheck = true)]
    private static partial void ConnectionWriteFinCore(ILogger logger, string connectionId, string reason);

    public static void ConnectionWriteFin(ILogger logger, string connectionId, string reason)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionWriteFinCore(logger, connectionId, reason);
        }
    }

    [LoggerMessage(8, LogLevel.Debug, @"Connection id ""{ConnectionId}"" sending RST because: ""{Reason}""",
        EventName = "ConnectionWriteRst", SkipEnabledCheck = true)]
    private static partial void ConnectionWriteRstCore(ILogger logger, string connectionId, string reason);

    public static void ConnectionWriteRst(ILogger logger, string connectionId, string reason)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionWriteRstCore(logger, connectionId, reason);
        }
    }

    [LoggerMessage(14, LogLevel.Debug, @"Connection id ""{ConnectionId}"" communication error.",
        EventName = "ConnectionError", SkipEnabledCheck = true)]
    private static partial void ConnectionErrorCore(ILogger logger, string connectionId, Exception ex);

    public static void ConnectionError(ILogger logger, string connectionId, Exception ex)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionErrorCore(logger, connectionId, ex);
        }
    }

    [LoggerMessage(19, LogLevel.Debug, @"Connection id ""{ConnectionId}"" reset.",
        EventName = "ConnectionReset", SkipEnabledCheck = true)]
    private static partial void ConnectionResetCore(ILogger logger, string connectionId);

    public static void ConnectionReset(ILogger logger, string connectionId)
    {
        if (logger.IsEnabled(LogLevel.Debug))
        {
            ConnectionResetCore(logger, connectionId);
        }
    }

    [LoggerMessage(100, LogLevel.Warning,
        "io_uring is unavailable, so Kestrel serves through its Sockets transport instead: {Reason}",
        EventName = "IoUringUnavailable")]
    public static partial void IoUringUnavailable(ILogger logger, string reason);

    [LoggerMessage(105, LogLevel.Warning,
        "io_uring is unavailable, so HttpClient connects through sockets instead: {Reason}",
        EventName = "IoUringUnavailableForHttpClient")]
    public static partial void IoUringUnavailableForHttpClient(ILogger logger, string reason);

    [LoggerMessage(101, LogLevel.Error,
        "An io_uring event loop handler threw; its connection was aborted and the loop goes on.",
        EventName = "LoopHandlerException")]
    public static partial void LoopHandlerException(ILogger logger, Exception ex);

    [LoggerMessage(102, LogLevel.Information, "io_uring transport started: {Features}.",
        EventName = "TransportStarted")]
    public static partial void TransportStarted(ILogger logger, string features);

    [LoggerMessage(104, LogLevel.Information,
        "io_uring event loops run under the normal scheduling policy: the kernel refused SCHED_BATCH " +
        "(errno {Errno}); set BatchScheduling = false to silence this.",
        EventName = "BatchSchedulingRefused")]
    public static partial void BatchSchedulingRefused(ILogger logger, int errno);

    [LoggerMessage(106, LogLevel.Information,
        "This process runs on one CPU, where idle .NET thread-pool workers spin and take turns with the io_uring " +
        "loop; where requests wait (e.g. on a database) DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0 saves much of " +
        "that CPU (see the IoUring docs, deployment.md).",
        EventName = "ThreadPoolSpinsOnOneCpu")]
    public static partial void ThreadPoolSpinsOnOneCpu(ILogger logger);

    [LoggerMessage(103, LogLevel.Debug, "io_uring transport listening on {EndPoint}.", EventName = "ListenerBound")]
    public static partial void ListenerBound(ILogger logger, string endPoint);
}
