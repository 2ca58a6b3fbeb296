namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>Compiles launcher.c with gcc once per test class.</summary>
public sealed class LauncherFixture : IAsyncLifetime
{
    private const string SourceRelativePath = "tests/IoUring.AspNetCore.Tests/Reliability/launcher.c";

    private readonly DirectoryInfo _work = Directory.CreateTempSubdirectory("iouring-launcher-");
    private string? _path;
    private Exception? _error;

    /// <summary>The compiled launcher; if gcc failed, every test that needs it fails with the same message.</summary>
    public string Path => _path ?? throw new InvalidOperationException("launcher.c could not be built", _error);

    public async Task InitializeAsync()
    {
        try
        {
            _path = await BuildAsync();
        }
        catch (Exception ex)
        {
            _error = ex; // reported by the tests that use Path, not as a fixture failure
        }
    }

    public Task DisposeAsync()
    {
        _work.Delete(recursive: true);
        return Task.CompletedTask;
    }

    private async Task<string> BuildAsync()
    {
        string gcc = RepoFiles.FindOnPath("gcc")
            ?? throw new InvalidOperationException("gcc was not found on PATH: the reliability tests compile launcher.c with it. Install it: sudo apt-get install build-essential");
        string source = RepoFiles.Find(SourceRelativePath);
        string binary = System.IO.Path.Combine(_work.FullName, "launcher");
        (int exitCode, string messages) = await ChildProcess.RunAsync(gcc, ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", binary, source], TimeSpan.FromSeconds(60));
        if (exitCode != 0)
        {
            throw new InvalidOperationException($"gcc could not compile {source} (are the kernel headers, linux-libc-dev, installed?):\n{messages}");
        }
        return binary;
    }
}

/// <summary>Files of this repository, found from the test binaries' directory.</summary>
internal static class RepoFiles
{
    /// <summary>Walks up from bin/&lt;config&gt;/&lt;tfm&gt;/ until <paramref name="relativePath"/> exists.</summary>
    public static string Find(string relativePath)
    {
        for (DirectoryInfo? dir = new(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            string candidate = Path.Combine(dir.FullName, relativePath);
            if (File.Exists(candidate))
            {
                return candidate;
            }
        }
        throw new FileNotFoundException($"{relativePath} was not found above {AppContext.BaseDirectory}");
    }

    /// <summary>
    /// A sample's dll, built in the configuration of these tests (the test project references the samples, so
    /// building the tests builds them).
    /// </summary>
    public static string Sample(string name)
    {
        string project = Find($"samples/{name}/{name}.csproj");
        string dll = Path.Combine(Path.GetDirectoryName(project)!, "bin", Configuration, TargetFramework, name + ".dll");
        if (!File.Exists(dll))
        {
            throw new FileNotFoundException($"{dll} is missing: build the test project (it references samples/{name}) in {Configuration}.");
        }
        return dll;
    }

    /// <summary>The configuration these tests were built in (Debug, Release), from bin/&lt;config&gt;/&lt;tfm&gt;/.</summary>
    public static string Configuration => new DirectoryInfo(AppContext.BaseDirectory.TrimEnd('/')).Parent!.Name;

    /// <summary>The target framework of these tests (net10.0), from bin/&lt;config&gt;/&lt;tfm&gt;/.</summary>
    public static string TargetFramework => new DirectoryInfo(AppContext.BaseDirectory.TrimEnd('/')).Name;

    public static string? FindOnPath(string program) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "")
            .Split(':', StringSplitOptions.RemoveEmptyEntries)
            .Select(dir => Path.Combine(dir, program))
            .FirstOrDefault(File.Exists);
}
