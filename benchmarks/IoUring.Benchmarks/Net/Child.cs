using System.Diagnostics;
using System.Globalization;

namespace IoUring.Benchmarks.Net;

/// <summary>A child process of this benchmark program pinned to one CPU, spoken to by lines.</summary>
internal sealed class Child : IDisposable
{
    private readonly Process _process;

    private Child(Process process) => _process = process;

    /// <summary>This benchmark program with <paramref name="args"/>, pinned to <paramref name="cpu"/>.</summary>
    public static Child Start(int cpu, params string[] args) => StartIn(null, cpu, args);

    /// <summary><see cref="Start"/> inside network namespace <paramref name="netns"/> (of /run/netns; null: this
    /// process's).</summary>
    public static Child StartIn(string? netns, int cpu, params string[] args)
    {
        // Under `dotnet IoUring.Benchmarks.dll` the process path is the host: name the assembly too.
        string self = Environment.ProcessPath!;
        return Path.GetFileNameWithoutExtension(self) == "dotnet"
            ? StartProgramIn(netns, cpu, self, [typeof(Child).Assembly.Location, .. args])
            : StartProgramIn(netns, cpu, self, args);
    }

    /// <summary><paramref name="program"/> (e.g. one of benchmarks/c) pinned to <paramref name="cpu"/>.</summary>
    public static Child StartProgram(int cpu, string program, params string[] args)
        => StartProgramIn(null, cpu, program, args);

    /// <summary><see cref="StartProgram"/> inside network namespace <paramref name="netns"/> (null: this
    /// process's).</summary>
    public static Child StartProgramIn(string? netns, int cpu, string program, params string[] args)
    {
        // nsenter --net, not `ip netns exec`, which also gives the child a mount namespace with /sys mounted anew (no
        // /sys/fs/cgroup for the runtime to read): only the network differs from a child outside. nsenter and taskset
        // both exec, so the process's pid is the program's.
        var start = new ProcessStartInfo(netns is null ? "taskset" : "nsenter")
        {
            RedirectStandardInput = true,
            RedirectStandardOutput = true,
            UseShellExecute = false,
        };
        if (netns is not null)
        {
            start.ArgumentList.Add($"--net=/run/netns/{netns}");
            start.ArgumentList.Add("taskset");
        }
        start.ArgumentList.Add("-c");
        start.ArgumentList.Add(cpu.ToString(CultureInfo.InvariantCulture));
        start.ArgumentList.Add(program);
        foreach (string arg in args)
        {
            start.ArgumentList.Add(arg);
        }
        return new Child(Process.Start(start)!);
    }

    /// <summary>The process id (the program's: see <see cref="StartProgramIn"/>).</summary>
    public int Id => _process.Id;

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

    /// <summary>Gives a bulk UDP child a line ("count", "pause", "go"); returns the counters it answers with.</summary>
    public ChildCounters Count(string command = "count")
    {
        WriteLine(command);
        return ChildCounters.Parse(ReadLine("count "));
    }

    /// <summary>The peak resident set size of the process so far (VmHWM of /proc/PID/status), in bytes.</summary>
    public long PeakRss()
    {
        foreach (string line in File.ReadLines($"/proc/{_process.Id}/status"))
        {
            if (line.StartsWith("VmHWM:", StringComparison.Ordinal))
            {
                // "VmHWM:     12345 kB"
                string kilobytes = line["VmHWM:".Length..].Trim().Split(' ')[0];
                return long.Parse(kilobytes, CultureInfo.InvariantCulture) * 1024;
            }
        }
        throw new InvalidOperationException($"no VmHWM in /proc/{_process.Id}/status (has the child ended?)");
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
