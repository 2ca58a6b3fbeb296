using System.Diagnostics;
using System.Globalization;
using System.Text.RegularExpressions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// A sample app run as a child process through launcher.c, with its stdout and stderr collected line by line and
/// its /proc entries readable. Disposing kills it (and anything it started), so no test leaves a server behind.
/// </summary>
internal sealed partial class ChildProcess : IAsyncDisposable
{
    /// <summary>USER_HZ: the unit of utime and stime in /proc/PID/stat (100 on every Linux architecture we run on).</summary>
    public const int TicksPerSecond = 100;

    private readonly Process _process;
    private readonly DirectoryInfo _workingDirectory;
    private readonly List<string> _lines = [];
    private Task _output = Task.CompletedTask;

    private ChildProcess(Process process, DirectoryInfo workingDirectory)
    {
        _process = process;
        _workingDirectory = workingDirectory;
    }

    /// <summary>Starts <c>launcher [launcherArgs] -- dotnet dll [args]</c> in an empty working directory (the app's content root).</summary>
    public static ChildProcess StartDotnet(string launcher, IEnumerable<string> launcherArgs, string dll, IEnumerable<string> args, IReadOnlyDictionary<string, string>? environment = null)
    {
        DirectoryInfo workingDirectory = Directory.CreateTempSubdirectory("iouring-child-");
        var start = new ProcessStartInfo(launcher)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            RedirectStandardInput = true,
            UseShellExecute = false,
            WorkingDirectory = workingDirectory.FullName,
        };
        foreach (string arg in launcherArgs.Concat(["--", DotnetHost(), dll]).Concat(args))
        {
            start.ArgumentList.Add(arg);
        }
        foreach ((string name, string value) in environment ?? new Dictionary<string, string>())
        {
            start.Environment[name] = value;
        }
        var process = new Process { StartInfo = start };
        var child = new ChildProcess(process, workingDirectory);
        process.Start();
        // Read line by line here; Dispose closes the pipes (Process.Dispose leaves streams read this way to the
        // finalizer, and the fd-counting tests would see them go).
        child._output = Task.WhenAll(child.PumpAsync(process.StandardOutput), child.PumpAsync(process.StandardError));
        return child;
    }

    private async Task PumpAsync(StreamReader reader)
    {
        while (await reader.ReadLineAsync() is { } line)
        {
            lock (_lines)
            {
                _lines.Add(line);
            }
        }
    }

    /// <summary>
    /// Runs <paramref name="program"/> to its end and returns its exit code and output (stdout, then stderr). Past
    /// <paramref name="timeout"/> it is killed with everything it started, and the test fails with its output. An
    /// environment value of null removes that variable. <paramref name="input"/>, when given, is its whole stdin.
    /// </summary>
    public static async Task<(int ExitCode, string Output)> RunAsync(string program, IEnumerable<string> args, TimeSpan timeout, string? workingDirectory = null, IReadOnlyDictionary<string, string?>? environment = null, string? input = null)
    {
        var start = new ProcessStartInfo(program)
        {
            RedirectStandardError = true,
            RedirectStandardOutput = true,
            RedirectStandardInput = input is not null,
            UseShellExecute = false,
            WorkingDirectory = workingDirectory ?? "",
        };
        foreach (string arg in args)
        {
            start.ArgumentList.Add(arg);
        }
        foreach ((string name, string? value) in environment ?? new Dictionary<string, string?>())
        {
            if (value is null)
            {
                start.Environment.Remove(name);
            }
            else
            {
                start.Environment[name] = value;
            }
        }
        using Process process = Process.Start(start)!;
        // Disposed here: Process.Dispose leaves streams read this way to the finalizer, and the fd-counting tests
        // would see them go.
        using StreamReader output = process.StandardOutput, errors = process.StandardError;
        Task<string> stdout = output.ReadToEndAsync();
        Task<string> stderr = errors.ReadToEndAsync();
        if (input is not null)
        {
            try
            {
                using StreamWriter stdin = process.StandardInput;
                await stdin.WriteAsync(input);
            }
            catch (IOException)
            {
                // it exited without reading: its exit code and output say why
            }
        }
        if (!await ExitOrKillAsync(process, timeout))
        {
            Assert.Fail($"{program} {string.Join(' ', start.ArgumentList)} did not finish within {timeout}:\n{await stdout}{await stderr}");
        }
        return (process.ExitCode, await stdout + await stderr);
    }

    /// <summary>
    /// Waits for <paramref name="process"/> to exit; past <paramref name="timeout"/> kills it with everything it started
    /// and waits for that. Answers whether it exited by itself.
    /// </summary>
    public static async Task<bool> ExitOrKillAsync(Process process, TimeSpan timeout)
    {
        using var cts = new CancellationTokenSource(timeout);
        try
        {
            await process.WaitForExitAsync(cts.Token);
            return true;
        }
        catch (OperationCanceledException)
        {
            process.Kill(entireProcessTree: true);
            await process.WaitForExitAsync();
            return false;
        }
    }

    /// <summary>The dotnet host running these tests, so the child gets the same runtime.</summary>
    public static string DotnetHost()
    {
        string? path = Environment.ProcessPath;
        if (path is not null && Path.GetFileName(path) == "dotnet")
        {
            return path;
        }
        return Environment.GetEnvironmentVariable("DOTNET_HOST_PATH") ?? "dotnet";
    }

    public int Id => _process.Id;

    public bool HasExited => _process.HasExited;

    public IReadOnlyList<string> Lines
    {
        get
        {
            lock (_lines)
            {
                return [.. _lines];
            }
        }
    }

    public string Output => string.Join('\n', Lines);

    /// <summary>Waits for an output line matching <paramref name="match"/>; fails with the output so far if the process exits or the time is up.</summary>
    public async Task<string> WaitForLineAsync(Func<string, bool> match, TimeSpan timeout)
    {
        var clock = Stopwatch.StartNew();
        while (true)
        {
            string? line = Lines.FirstOrDefault(match);
            if (line is not null)
            {
                return line;
            }
            if (_process.HasExited)
            {
                await _output.WaitAsync(TimeSpan.FromSeconds(10)); // the rest of the output
                line = Lines.FirstOrDefault(match);
                if (line is not null)
                {
                    return line;
                }
                Assert.Fail($"the child exited ({_process.ExitCode}) before printing the expected line:\n{Output}");
            }
            if (clock.Elapsed > timeout)
            {
                Assert.Fail($"no expected line within {timeout}:\n{Output}");
            }
            await Task.Delay(20);
        }
    }

    /// <summary>The port of Kestrel's "Now listening on: http://127.0.0.1:PORT" (or https://) line.</summary>
    public async Task<int> WaitForKestrelPortAsync(TimeSpan timeout)
    {
        string line = await WaitForLineAsync(l => ListeningLine().IsMatch(l), timeout);
        return int.Parse(ListeningLine().Match(line).Groups[1].Value, CultureInfo.InvariantCulture);
    }

    [GeneratedRegex(@"Now listening on: https?://127\.0\.0\.1:(\d+)")]
    private static partial Regex ListeningLine();

    public async Task<int> WaitForExitAsync(TimeSpan timeout)
    {
        using var cts = new CancellationTokenSource(timeout);
        try
        {
            await _process.WaitForExitAsync(cts.Token);
            await _output.WaitAsync(cts.Token);
        }
        catch (OperationCanceledException)
        {
            Assert.Fail($"the child did not exit within {timeout}:\n{Output}");
        }
        return _process.ExitCode;
    }

    /// <summary>utime + stime of the whole process, in <see cref="TicksPerSecond"/> units.</summary>
    public long CpuTicks() => ParseTicks(File.ReadAllText($"/proc/{Id}/stat")).Ticks;

    /// <summary>utime + stime of each thread, by thread id, with the thread's name (comm).</summary>
    public Dictionary<int, (string Name, long Ticks)> ThreadTicks()
    {
        var threads = new Dictionary<int, (string, long)>();
        foreach (string task in Directory.GetDirectories($"/proc/{Id}/task"))
        {
            try
            {
                threads[int.Parse(Path.GetFileName(task), CultureInfo.InvariantCulture)] = ParseTicks(File.ReadAllText(Path.Combine(task, "stat")));
            }
            catch (IOException)
            {
                // the thread ended while we looked
            }
        }
        return threads;
    }

    /// <summary>Context switches (voluntary + involuntary) of each thread whose name starts with <paramref name="prefix"/>, by thread id.</summary>
    public Dictionary<int, long> ContextSwitches(string prefix)
    {
        var switches = new Dictionary<int, long>();
        foreach (string task in Directory.GetDirectories($"/proc/{Id}/task"))
        {
            try
            {
                string[] status = File.ReadAllLines(Path.Combine(task, "status"));
                if (status[0].StartsWith("Name:", StringComparison.Ordinal) && status[0][5..].Trim().StartsWith(prefix, StringComparison.Ordinal))
                {
                    switches[int.Parse(Path.GetFileName(task), CultureInfo.InvariantCulture)] = status
                        .Where(l => l.StartsWith("voluntary_ctxt_switches:", StringComparison.Ordinal) || l.StartsWith("nonvoluntary_ctxt_switches:", StringComparison.Ordinal))
                        .Sum(l => long.Parse(l[(l.IndexOf(':', StringComparison.Ordinal) + 1)..].Trim(), CultureInfo.InvariantCulture));
                }
            }
            catch (IOException)
            {
                // the thread ended while we looked
            }
        }
        return switches;
    }

    /// <summary>Names (comm) of the live threads.</summary>
    public List<string> ThreadNames() => [.. ThreadTicks().Values.Select(t => t.Name)];

    /// <summary>Open fds of the child.</summary>
    public int OpenFds() => Directory.GetFileSystemEntries($"/proc/{Id}/fd").Length;

    /// <summary>A field of /proc/PID/status, e.g. "Seccomp".</summary>
    public string? Status(string field) =>
        File.ReadAllLines($"/proc/{Id}/status")
            .Where(l => l.StartsWith(field + ":", StringComparison.Ordinal))
            .Select(l => l[(field.Length + 1)..].Trim())
            .FirstOrDefault();

    private static (string Name, long Ticks) ParseTicks(string stat)
    {
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
        int open = stat.IndexOf('(', StringComparison.Ordinal);
        int close = stat.LastIndexOf(')');
        string[] fields = stat[(close + 2)..].Split(' ');
        // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
        long utime = long.Parse(fields[11], CultureInfo.InvariantCulture);
        long stime = long.Parse(fields[12], CultureInfo.InvariantCulture);
        return (stat[(open + 1)..close], utime + stime);
    }

    /// <summary>Kills the child if it still runs and closes its pipes, without blocking a thread-pool thread.</summary>
    public async ValueTask DisposeAsync()
    {
        try
        {
            if (!_process.HasExited)
            {
                _process.Kill(entireProcessTree: true);
            }
            using var cts = new CancellationTokenSource(TimeSpan.FromSeconds(10));
            await _process.WaitForExitAsync(cts.Token);
            await _output.WaitAsync(cts.Token); // EOF once the child is gone
            _process.StandardInput.Dispose();
            _process.StandardOutput.Dispose();
            _process.StandardError.Dispose();
        }
        catch (Exception ex) when (ex is InvalidOperationException or OperationCanceledException or IOException)
        {
            // never started, already reaped, or a pipe already broken
        }
        _process.Dispose();
        try
        {
            _workingDirectory.Delete(recursive: true);
        }
        catch (IOException)
        {
        }
    }
}
