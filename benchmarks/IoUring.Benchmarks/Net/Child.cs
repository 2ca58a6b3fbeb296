using System.Diagnostics;
using System.Globalization;

namespace IoUring.Benchmarks.Net;

/// <summary>A child process of this benchmark program pinned to one CPU, spoken to by lines.</summary>
internal sealed class Child : IDisposable
{
    private readonly Process _process;

    private Child(Process process) => _process = process;

    public static Child Start(int cpu, params string[] args)
    {
        // Under `dotnet IoUring.Benchmarks.dll` the process path is the host: name the assembly too.
        string self = Environment.ProcessPath!;
        var start = new ProcessStartInfo("taskset") { RedirectStandardInput = true, RedirectStandardOutput = true, UseShellExecute = false };
        start.ArgumentList.Add("-c");
        start.ArgumentList.Add(cpu.ToString(CultureInfo.InvariantCulture));
        start.ArgumentList.Add(self);
        if (Path.GetFileNameWithoutExtension(self) == "dotnet")
        {
            start.ArgumentList.Add(typeof(Child).Assembly.Location);
        }
        foreach (string arg in args)
        {
            start.ArgumentList.Add(arg);
        }
        return new Child(Process.Start(start)!);
    }

    /// <summary>Reads lines until one starts with <paramref name="prefix"/>; returns the rest of it.</summary>
    public string ReadLine(string prefix)
    {
        while (_process.StandardOutput.ReadLine() is { } line)
        {
            if (line.StartsWith(prefix, StringComparison.Ordinal))
            {
                return line[prefix.Length..];
            }
        }
        throw new InvalidOperationException($"child {_process.Id} ended before printing '{prefix}'");
    }

    /// <summary>Writes one line to the child's stdin.</summary>
    public void WriteLine(string line)
    {
        _process.StandardInput.WriteLine(line);
        _process.StandardInput.Flush();
    }

    /// <summary>utime + stime of the process so far (taskset execs the program, so the pid is the program's).</summary>
    public TimeSpan CpuTime()
    {
        _process.Refresh();
        return _process.TotalProcessorTime;
    }

    public void Dispose()
    {
        _process.StandardInput.Close();
        if (!_process.WaitForExit(10_000))
        {
            _process.Kill(entireProcessTree: true);
        }
        _process.Dispose();
    }
}
