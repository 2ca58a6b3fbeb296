using System.Diagnostics;

namespace IoUring.Benchmarks.Support;

/// <summary>The C programs of benchmarks/c, built on demand with its Makefile (they are never committed).</summary>
internal static class CPrograms
{
    /// <summary>benchmarks/c of the repository this program runs from.</summary>
    public static string Directory => Path.Combine(FindRepoRoot(), "benchmarks", "c");

    /// <summary>
    /// Runs <c>make -C benchmarks/c TARGET</c> (which rebuilds only what changed) and returns the program's path;
    /// throws <see cref="InvalidOperationException"/> saying what <paramref name="needs"/> when make or the compiler
    /// fails or is missing.
    /// </summary>
    public static string Make(string target, string needs)
    {
        string directory = Directory;
        var start = new ProcessStartInfo("make")
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        start.ArgumentList.Add("-C");
        start.ArgumentList.Add(directory);
        start.ArgumentList.Add(target);
        string errors;
        int exitCode;
        try
        {
            using Process make = Process.Start(start)!;
            Task<string> output = make.StandardOutput.ReadToEndAsync();
            errors = make.StandardError.ReadToEnd();
            make.WaitForExit();
            output.Wait();
            exitCode = make.ExitCode;
        }
        catch (System.ComponentModel.Win32Exception ex)
        {
            throw new InvalidOperationException($"Building benchmarks/c/{target} needs make and {needs}.", ex);
        }
        if (exitCode != 0)
        {
            throw new InvalidOperationException(
                $"make -C {directory} {target} failed ({exitCode}); it needs {needs}: {errors.Trim()}");
        }
        return Path.Combine(directory, target);
    }

    private static string FindRepoRoot()
    {
        // BenchmarkDotNet runs this from a generated project's output folder, which is inside the repository.
        for (DirectoryInfo? dir = new(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            if (File.Exists(Path.Combine(dir.FullName, "IoUring.sln")))
            {
                return dir.FullName;
            }
        }
        throw new DirectoryNotFoundException(
            $"No IoUring.sln above {AppContext.BaseDirectory}: the C programs need the repository's benchmarks/c.");
    }
}
