using System.Globalization;
using BenchmarkDotNet.Columns;
using BenchmarkDotNet.Reports;
using BenchmarkDotNet.Running;

namespace IoUring.Benchmarks.Support;

/// <summary>
/// Bytes per operation (the value of an integer parameter) over the mean time per operation, in MB/s (10^6 bytes).
/// </summary>
public sealed class ThroughputColumn(string bytesParameterName) : IColumn
{
    public string Id => $"{nameof(ThroughputColumn)}.{bytesParameterName}";
    public string ColumnName => "MB/s";
    public bool AlwaysShow => true;
    public ColumnCategory Category => ColumnCategory.Custom;
    public int PriorityInCategory => 0;
    public bool IsNumeric => true;
    public UnitType UnitType => UnitType.Dimensionless;
    public string Legend => $"{bytesParameterName} bytes per operation over the mean time per operation, in 10^6 bytes per second";

    public bool IsDefault(Summary summary, BenchmarkCase benchmarkCase) => false;

    public bool IsAvailable(Summary summary) =>
        summary.BenchmarksCases.Any(c => c.Parameters.Items.Any(p => p.Name == bytesParameterName));

    public string GetValue(Summary summary, BenchmarkCase benchmarkCase) => GetValue(summary, benchmarkCase, summary.Style);

    public string GetValue(Summary summary, BenchmarkCase benchmarkCase, SummaryStyle style)
    {
        double? nanoseconds = summary[benchmarkCase]?.ResultStatistics?.Mean;
        object? bytes = benchmarkCase.Parameters[bytesParameterName];
        return nanoseconds is null or 0 || bytes is null
            ? "?"
            : (Convert.ToDouble(bytes, CultureInfo.InvariantCulture) / nanoseconds.Value * 1e3).ToString("N0", CultureInfo.InvariantCulture);
    }
}
