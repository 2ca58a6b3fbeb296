using System.Collections.Concurrent;
using Microsoft.Extensions.Logging;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>Collects every log event of a host, for assertions on event ids and levels.</summary>
public sealed class TestLogs : ILoggerProvider
{
    private readonly ConcurrentQueue<LogRecord> _records = new();

    public IReadOnlyCollection<LogRecord> Records => _records;

    public IEnumerable<LogRecord> Where(string categoryPrefix, int? eventId = null, LogLevel? level = null)
        => _records.Where(r => r.Category.StartsWith(categoryPrefix, StringComparison.Ordinal)
            && (eventId is null || r.EventId.Id == eventId) && (level is null || r.Level == level));

    /// <summary>Fails listing every warning or error logged (level, category, event id, message, exception type).</summary>
    public void AssertNoWarnings()
        => Xunit.Assert.Empty(_records.Where(r => r.Level >= LogLevel.Warning).Select(r => $"{r.Level} {r.Category}[{r.EventId.Id}] {r.Message} {r.Exception?.GetType().Name}"));

    public ILogger CreateLogger(string categoryName) => new Logger(this, categoryName);

    public void Dispose() { }

    public sealed record LogRecord(string Category, LogLevel Level, EventId EventId, string Message, Exception? Exception);

    private sealed class Logger(TestLogs owner, string category) : ILogger
    {
        public IDisposable? BeginScope<TState>(TState state) where TState : notnull => null;

        public bool IsEnabled(LogLevel logLevel) => logLevel != LogLevel.None;

        public void Log<TState>(LogLevel logLevel, EventId eventId, TState state, Exception? exception, Func<TState, Exception?, string> formatter)
            => owner._records.Enqueue(new LogRecord(category, logLevel, eventId, formatter(state, exception), exception));
    }
}
