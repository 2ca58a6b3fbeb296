using System.Diagnostics;
using System.Globalization;
using System.Net.WebSockets;
using System.Text;
using IoUring.AspNetCore.Tests.Reliability;

namespace IoUring.AspNetCore.Tests.Browser;

/// <summary>
/// Debian's headless Chromium (<c>chromium</c> on PATH) opened on one page, in a throwaway directory that is both its
/// profile and its HOME (so its crash handler's database and caches land there too, not in the user's home). Its
/// DevTools endpoint is read from stderr ("DevTools listening on ws://..."): it tells that the browser is up, and
/// disposing closes the browser through it (Browser.close), so that Chromium ends its own helper processes; whatever
/// is left after that is killed, and the directory deleted.
/// </summary>
internal sealed class Chromium : IAsyncDisposable
{
    private const string DevToolsLine = "DevTools listening on ";
    private static readonly TimeSpan s_startTimeout = TimeSpan.FromSeconds(30);
    private static readonly TimeSpan s_exitTimeout = TimeSpan.FromSeconds(10);

    private readonly Process _process;
    private readonly DirectoryInfo _home;
    private readonly List<string> _lines = [];
    private readonly TaskCompletionSource<Uri> _devTools = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private Task _output = Task.CompletedTask;

    private Chromium(Process process, DirectoryInfo home)
    {
        _process = process;
        _home = home;
    }

    /// <summary>Chromium's output so far (stdout and stderr), for failure messages.</summary>
    public string Output
    {
        get
        {
            lock (_lines)
            {
                return string.Join('\n', _lines);
            }
        }
    }

    /// <summary>
    /// Starts Chromium headless on <paramref name="url"/> and waits for its DevTools endpoint. Fails the test, saying how
    /// to install it, when there is no <c>chromium</c>: CI installs it (.ci/run), so a missing browser is not a skip.
    /// </summary>
    public static async Task<Chromium> StartAsync(Uri url, IEnumerable<string>? flags = null)
    {
        string executable = Find() ?? throw new Xunit.Sdk.XunitException(
            "chromium is not installed (no chromium on PATH): apt-get install chromium (.ci/run installs it on a fresh machine)");
        DirectoryInfo home = Directory.CreateTempSubdirectory("iouring-chromium-");
        var start = new ProcessStartInfo(executable)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        start.Environment["HOME"] = home.FullName;
        start.Environment.Remove("XDG_CONFIG_HOME");
        start.Environment.Remove("XDG_CACHE_HOME");
        string[] arguments =
        [
            "--headless=new",
            "--no-sandbox",                 // the tests run as root
            "--remote-debugging-port=0",    // any free port, announced on stderr
            "--user-data-dir=" + Path.Combine(home.FullName, "profile"),
            "--no-first-run",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ];
        foreach (string argument in arguments.Concat(flags ?? []).Append(url.AbsoluteUri))
        {
            start.ArgumentList.Add(argument);
        }
        var process = new Process { StartInfo = start };
        var chromium = new Chromium(process, home);
        try
        {
            process.Start();
            chromium._output = Task.WhenAll(chromium.PumpAsync(process.StandardOutput), chromium.PumpAsync(process.StandardError));
            Task exited = process.WaitForExitAsync();
            Task first = await Task.WhenAny(chromium._devTools.Task, exited, Task.Delay(s_startTimeout));
            if (first != chromium._devTools.Task)
            {
                Assert.Fail(exited.IsCompleted
                    ? $"chromium exited ({process.ExitCode}) before its DevTools endpoint was up:\n{chromium.Output}"
                    : $"chromium's DevTools endpoint was not up within {s_startTimeout}:\n{chromium.Output}");
            }
            return chromium;
        }
        catch
        {
            await chromium.DisposeAsync();
            throw;
        }
    }

    private static string? Find()
        => (Environment.GetEnvironmentVariable("PATH") ?? "").Split(':', StringSplitOptions.RemoveEmptyEntries)
            .Select(directory => Path.Combine(directory, "chromium"))
            .FirstOrDefault(File.Exists);

    private async Task PumpAsync(StreamReader reader)
    {
        while (await reader.ReadLineAsync() is { } line)
        {
            lock (_lines)
            {
                _lines.Add(line);
            }
            if (line.StartsWith(DevToolsLine, StringComparison.Ordinal))
            {
                _devTools.TrySetResult(new Uri(line[DevToolsLine.Length..].Trim()));
            }
        }
    }

    /// <summary>
    /// The live processes of this browser, by pid: every process whose command line names its directory (the browser,
    /// its zygotes, renderers and services by --user-data-dir, the crash handlers by their database under HOME). The
    /// crash handlers are not the browser's children (they are reparented to init), so the process tree would miss them.
    /// </summary>
    public List<int> RunningProcesses()
    {
        var running = new List<int>();
        foreach (string directory in Directory.GetDirectories("/proc"))
        {
            if (!int.TryParse(Path.GetFileName(directory), NumberStyles.None, CultureInfo.InvariantCulture, out int pid))
            {
                continue;
            }
            try
            {
                string stat = File.ReadAllText(Path.Combine(directory, "stat"));
                // "pid (comm) state ...": comm may hold spaces and parentheses; a zombie ('Z') waits only to be reaped.
                if (stat[stat.LastIndexOf(')') + 2] != 'Z'
                    && File.ReadAllText(Path.Combine(directory, "cmdline")).Contains(_home.FullName + "/", StringComparison.Ordinal))
                {
                    running.Add(pid);
                }
            }
            catch (Exception ex) when (ex is IOException or UnauthorizedAccessException)
            {
                // gone while we looked
            }
        }
        return running;
    }

    /// <summary>Closes the browser (Browser.close over DevTools, then a kill of whatever is left) and deletes its directory.</summary>
    public async ValueTask DisposeAsync()
    {
        try
        {
            if (!_process.HasExited)
            {
                await CloseAsync();
                await ChildProcess.ExitOrKillAsync(_process, s_exitTimeout);
            }
        }
        catch (InvalidOperationException)
        {
            // never started
        }
        // Helpers end on their own once the browser is gone; any that has not within the limit is killed (and one that
        // outlives even that is for the caller's RunningProcesses to see).
        var clock = Stopwatch.StartNew();
        while (RunningProcesses() is { Count: > 0 } left && clock.Elapsed < 2 * s_exitTimeout)
        {
            if (clock.Elapsed > s_exitTimeout)
            {
                left.ForEach(Kill);
            }
            await Task.Delay(20);
        }
        try
        {
            await _output.WaitAsync(s_exitTimeout); // EOF once the browser is gone
            // Closed here: Process.Dispose leaves streams read this way to the finalizer.
            _process.StandardOutput.Dispose();
            _process.StandardError.Dispose();
        }
        catch (Exception ex) when (ex is TimeoutException or InvalidOperationException)
        {
            // a helper still holding the pipes, or never started
        }
        _process.Dispose();
        await DeleteDirectoryAsync();
    }

    /// <summary>Asks the browser to close through its DevTools endpoint, or kills it when it has none.</summary>
    private async Task CloseAsync()
    {
        if (!_devTools.Task.IsCompletedSuccessfully)
        {
            _process.Kill(entireProcessTree: true);
            return;
        }
        try
        {
            using var cts = new CancellationTokenSource(s_exitTimeout);
            using var socket = new ClientWebSocket();
            await socket.ConnectAsync(_devTools.Task.Result, cts.Token);
            await socket.SendAsync(Encoding.UTF8.GetBytes("""{"id":1,"method":"Browser.close"}"""), WebSocketMessageType.Text, endOfMessage: true, cts.Token);
            // The answer, or the browser closing the socket as it goes.
            await socket.ReceiveAsync(new byte[4096], cts.Token);
        }
        catch (Exception ex) when (ex is WebSocketException or OperationCanceledException)
        {
            // closing already, or not answering: the caller's wait ends in a kill
        }
    }

    private static void Kill(int pid)
    {
        try
        {
            using Process left = Process.GetProcessById(pid);
            left.Kill();
        }
        catch (Exception ex) when (ex is ArgumentException or InvalidOperationException)
        {
            // gone meanwhile
        }
    }

    private async Task DeleteDirectoryAsync()
    {
        // The last helper to go may still have been writing: try again for a moment.
        for (int attempt = 0; ; attempt++)
        {
            try
            {
                _home.Refresh();
                if (_home.Exists)
                {
                    _home.Delete(recursive: true);
                }
                return;
            }
            catch (IOException) when (attempt < 20)
            {
                await Task.Delay(50);
            }
        }
    }

    /// <summary>Whether the browser's directory is gone (after disposing).</summary>
    public bool DirectoryDeleted
    {
        get
        {
            _home.Refresh();
            return !_home.Exists;
        }
    }
}
