using System.Globalization;
using BenchmarkDotNet.Columns;
using BenchmarkDotNet.Reports;
using BenchmarkDotNet.Running;

namespace IoUring.Benchmarks.Support;

/// <summary>
/// Mean of a case divided by the mean of its sibling that differs only in one parameter, set to a baseline value.
/// BenchmarkDotNet's own Ratio column compares methods, not parameter values.
/// </summary>
public sealed class ParameterRatioColumn(string parameterName, object baselineValue) : IColumn
{
    public string Id => $"{nameof(ParameterRatioColumn)}.{parameterName}";
    public string ColumnName => $"Ratio vs {parameterName}={baselineValue}";
    public bool AlwaysShow => true;
    public ColumnCategory Category => ColumnCategory.Baseline;
    public int PriorityInCategory => 0;
    public bool IsNumeric => true;
    public UnitType UnitType => UnitType.Dimensionless;
    public string Legend => $"Mean time of this case / mean time of the same case with {parameterName}={baselineValue} (below 1: faster)";

    public bool IsDefault(Summary summary, BenchmarkCase benchmarkCase) => false;

    public bool IsAvailable(Summary summary) =>
        summary.BenchmarksCases.Any(c => c.Parameters.Items.Any(p => p.Name == parameterName));

    public string GetValue(Summary summary, BenchmarkCase benchmarkCase) => GetValue(summary, benchmarkCase, summary.Style);

    public string GetValue(Summary summary, BenchmarkCase benchmarkCase, SummaryStyle style)
    {
        BenchmarkCase? baseline = summary.BenchmarksCases.FirstOrDefault(c => IsBaselineOf(c, benchmarkCase));
        double? mean = summary[benchmarkCase]?.ResultStatistics?.Mean;
        double? baselineMean = baseline is null ? null : summary[baseline]?.ResultStatistics?.Mean;
        return mean is null || baselineMean is null or 0
            ? "?"
            : (mean.Value / baselineMean.Value).ToString("0.000", CultureInfo.InvariantCulture);
    }

    private bool IsBaselineOf(BenchmarkCase candidate, BenchmarkCase benchmarkCase)
    {
        if (candidate.Descriptor != benchmarkCase.Descriptor || candidate.Job.DisplayInfo != benchmarkCase.Job.DisplayInfo
            || !Equals(candidate.Parameters[parameterName], baselineValue))
        {
            return false;
        }
        foreach (var parameter in benchmarkCase.Parameters.Items)
        {
            if (parameter.Name != parameterName && !Equals(candidate.Parameters[parameter.Name], parameter.Value))
            {
                return false;
            }
        }
        return true;
    }
}
