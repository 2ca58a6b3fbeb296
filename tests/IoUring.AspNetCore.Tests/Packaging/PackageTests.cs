using System.Diagnostics;
using System.IO.Compression;
using System.Net;
using System.Text.Json;
using System.Xml.Linq;
using IoUring.AspNetCore.Tests.Reliability;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Packaging;

/// <summary>
/// The packages as a user gets them. Both projects are packed (from this test run's build) into a folder feed under
/// a version no package cache has seen; a new web app in a temporary folder references IoUringNet.AspNetCore by that
/// version, restores into its own empty package folder (with this repository's sources beside the feed), and its
/// Program.cs is the README's Kestrel snippet, read from README.md now. It must build, serve "Hello from io_uring"
/// and log that it listens through io_uring, not through the Sockets fallback.
/// </summary>
public sealed class PackageTests(LauncherFixture launcher, ITestOutputHelper output) : IClassFixture<LauncherFixture>
{
    private static readonly TimeSpan s_command = TimeSpan.FromMinutes(3);
    private static readonly TimeSpan s_startup = TimeSpan.FromSeconds(60);
    // (project, package id): the ids differ from the projects' names because nuget.org's IoUring is another package.
    private static readonly (string Project, string Id)[] s_packages = [("IoUring", "IoUringNet"), ("IoUring.AspNetCore", "IoUringNet.AspNetCore")];

    [Fact]
    public async Task Packed_packages_run_the_README_Kestrel_snippet_on_io_uring()
    {
        var clock = Stopwatch.StartNew();
        string root = Path.GetDirectoryName(RepoFiles.Find("IoUring.sln"))!;
        DirectoryInfo work = Directory.CreateTempSubdirectory("iouring-pack-");
        try
        {
            string feed = Path.Combine(work.FullName, "feed");
            string version = await PackAsync(root, work.FullName, feed);
            output.WriteLine($"packed {version} in {clock.Elapsed.TotalSeconds:F1} s");
            AssertPackageContents(root, feed, version);

            string app = Path.Combine(work.FullName, "app");
            string packages = Path.Combine(work.FullName, "packages");
            string dll = await BuildAppAsync(root, app, feed, packages, version);
            output.WriteLine($"built the app in {clock.Elapsed.TotalSeconds:F1} s");
            AssertResolvedFromPackages(app, packages, version);

            await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, ["--lifetime", "120"], dll, ["--urls", "http://127.0.0.1:0"],
                new Dictionary<string, string> { ["Logging__LogLevel__IoUring.AspNetCore.Transport"] = "Debug" });
            int port = await child.WaitForKestrelPortAsync(s_startup);
            using var client = new HttpClient { Timeout = s_startup };
            using HttpResponseMessage response = await client.GetAsync(new Uri($"http://127.0.0.1:{port}/"));
            string body = await response.Content.ReadAsStringAsync();
            output.WriteLine(child.Output);

            Assert.Equal(HttpStatusCode.OK, response.StatusCode);
            Assert.Equal("Hello from io_uring", body);
            // The console logger writes "dbug: Category[EventId]" and the message on the next line. The Sockets
            // fallback logs warning 100; 103 (ListenerBound) comes from the io_uring listener only.
            IReadOnlyList<string> lines = child.Lines;
            Assert.DoesNotContain(lines, l => l.StartsWith("warn:", StringComparison.Ordinal) || l.StartsWith("fail:", StringComparison.Ordinal) || l.StartsWith("crit:", StringComparison.Ordinal));
            int bound = Assert.Single(Enumerable.Range(0, lines.Count - 1), i => lines[i] == "dbug: IoUring.AspNetCore.Transport[103]");
            Assert.Equal($"io_uring transport listening on 127.0.0.1:{port}.", lines[bound + 1].Trim());
            output.WriteLine($"served in {clock.Elapsed.TotalSeconds:F1} s");
        }
        finally
        {
            try
            {
                work.Delete(recursive: true);
            }
            catch (IOException ex)
            {
                output.WriteLine($"could not delete {work.FullName}: {ex.Message}");
            }
        }
    }

    /// <summary>Packs both projects from this test run's build into <paramref name="feed"/>; returns their version.</summary>
    private async Task<string> PackAsync(string root, string work, string feed)
    {
        // A prerelease of the repository's VersionPrefix that no cache can hold: the packages restored are these.
        string suffix = $"packtest.t{Guid.NewGuid():N}";
        await Task.WhenAll(s_packages.Select(p => p.Project).Select(project => DotnetAsync(root,
            "pack", $"src/{project}/{project}.csproj", "--no-build", "-c", RepoFiles.Configuration, "-o", feed,
            $"-p:VersionSuffix={suffix}", $"-p:NuspecOutputPath={Path.Combine(work, "nuspec", project)}/")));
        string package = Assert.Single(Directory.GetFiles(feed, "IoUringNet.AspNetCore.*.nupkg"));
        string version = Path.GetFileNameWithoutExtension(package)["IoUringNet.AspNetCore.".Length..];
        Assert.EndsWith("-" + suffix, version);
        return version;
    }

    /// <summary>Each package holds its dll, XML docs and the README, has its symbols beside it, and IoUringNet.AspNetCore depends on IoUringNet.</summary>
    private static void AssertPackageContents(string root, string feed, string version)
    {
        string readme = File.ReadAllText(Path.Combine(root, "README.md"));
        foreach ((string project, string id) in s_packages)
        {
            string tfm = RepoFiles.TargetFramework;
            using (ZipArchive package = ZipFile.OpenRead(Path.Combine(feed, $"{id}.{version}.nupkg")))
            {
                string[] entries = [.. package.Entries.Select(e => e.FullName)];
                Assert.Contains($"lib/{tfm}/{project}.dll", entries);
                Assert.Contains($"lib/{tfm}/{project}.xml", entries);
                using (var reader = new StreamReader(package.GetEntry("README.md")!.Open()))
                {
                    Assert.Equal(readme, reader.ReadToEnd());
                }

                XElement metadata = ReadNuspec(package, id).Root!.Elements().Single(e => e.Name.LocalName == "metadata");
                string Field(string name) => metadata.Elements().Single(e => e.Name.LocalName == name).Value;
                Assert.Equal(version, Field("version"));
                Assert.Equal("MIT", Field("license"));
                Assert.Equal("README.md", Field("readme"));
                string[] dependencies = [.. metadata.Descendants().Where(e => e.Name.LocalName == "dependency").Select(e => $"{e.Attribute("id")!.Value} {e.Attribute("version")!.Value}")];
                Assert.Equal(id, Field("id"));
                string[] expected = project == "IoUring.AspNetCore" ? [$"IoUringNet {version}"] : [];
                Assert.Equal(expected, dependencies);
            }
            using ZipArchive symbols = ZipFile.OpenRead(Path.Combine(feed, $"{id}.{version}.snupkg"));
            Assert.Contains($"lib/{tfm}/{project}.pdb", symbols.Entries.Select(e => e.FullName));
        }
    }

    private static XDocument ReadNuspec(ZipArchive package, string id)
    {
        using Stream nuspec = package.GetEntry($"{id}.nuspec")!.Open();
        return XDocument.Load(nuspec);
    }

    /// <summary>Writes the app (its Program.cs the README's Kestrel snippet), builds it and returns its dll.</summary>
    private async Task<string> BuildAppAsync(string root, string app, string feed, string packages, string version)
    {
        Directory.CreateDirectory(app);
        // Ends MSBuild's search upwards for Directory.* files: the app is a user's, with nothing of this repository's
        // build around it (and nothing of whatever lies above the temporary folder).
        foreach (string file in new[] { "Directory.Build.props", "Directory.Build.targets", "Directory.Packages.props" })
        {
            File.WriteAllText(Path.Combine(app, file), "<Project />\n");
        }
        File.WriteAllText(Path.Combine(app, "App.csproj"), $"""
            <Project Sdk="Microsoft.NET.Sdk.Web">
              <PropertyGroup>
                <TargetFramework>{RepoFiles.TargetFramework}</TargetFramework>
                <Nullable>enable</Nullable>
                <ImplicitUsings>enable</ImplicitUsings>
                <TreatWarningsAsErrors>true</TreatWarningsAsErrors>
                <!-- No vulnerability audit: its data need not be served by the registry this machine reaches. -->
                <NuGetAudit>false</NuGetAudit>
              </PropertyGroup>
              <ItemGroup>
                <PackageReference Include="IoUringNet.AspNetCore" Version="[{version}]" />
              </ItemGroup>
            </Project>
            """);
        File.WriteAllText(Path.Combine(app, "Program.cs"), ReadmeKestrelSnippet(root));
        File.WriteAllText(Path.Combine(app, "nuget.config"), await NuGetConfigAsync(root, feed));

        await DotnetAsync(app, ["build", "App.csproj", "-c", "Release"], new Dictionary<string, string?> { ["NUGET_PACKAGES"] = packages });
        return Path.Combine(app, "bin", "Release", RepoFiles.TargetFramework, "App.dll");
    }

    /// <summary>The code block under README.md's "### Kestrel" heading.</summary>
    private static string ReadmeKestrelSnippet(string root)
    {
        string[] readme = File.ReadAllLines(Path.Combine(root, "README.md"));
        int heading = Array.IndexOf(readme, "### Kestrel");
        Assert.True(heading >= 0, "README.md has no \"### Kestrel\" heading");
        int open = Array.FindIndex(readme, heading, l => l.StartsWith("```", StringComparison.Ordinal));
        int close = Array.FindIndex(readme, open + 1, l => l.StartsWith("```", StringComparison.Ordinal));
        Assert.True(open > heading && close > open, "no code block under README.md's \"### Kestrel\"");
        Assert.Equal("```csharp", readme[open]);
        return string.Join('\n', readme[(open + 1)..close]) + "\n";
    }

    /// <summary>
    /// The feed first, then the sources this repository restores from (its nuget.config and the user's, as the
    /// NuGet client merges them), so the app reaches the same registry as the repository's own build.
    /// </summary>
    private async Task<string> NuGetConfigAsync(string root, string feed)
    {
        string sources = await DotnetAsync(root, "nuget", "list", "source", "--format", "short");
        // Lines "E https://..." (enabled) or "D ..." (disabled).
        string[] enabled = [.. sources.Split('\n').Select(l => l.Trim()).Where(l => l.StartsWith("E ", StringComparison.Ordinal)).Select(l => l[2..].Trim())];
        var adds = new List<XElement> { new("add", new XAttribute("key", "packtest-feed"), new XAttribute("value", feed)) };
        adds.AddRange(enabled.Select((source, i) => new XElement("add", new XAttribute("key", $"source{i}"), new XAttribute("value", source))));
        return new XDocument(new XElement("configuration", new XElement("packageSources", new XElement("clear"), adds))).ToString();
    }

    private Task<string> DotnetAsync(string workingDirectory, params string[] args) => DotnetAsync(workingDirectory, args, null);

    /// <summary>Runs the dotnet CLI without build servers (nothing stays running after the test), failing on a non-zero exit.</summary>
    private async Task<string> DotnetAsync(string workingDirectory, string[] args, IReadOnlyDictionary<string, string?>? environment)
    {
        var env = new Dictionary<string, string?>(environment ?? new Dictionary<string, string?>())
        {
            ["DOTNET_CLI_TELEMETRY_OPTOUT"] = "1",
            ["DOTNET_NOLOGO"] = "1",
            ["MSBUILDDISABLENODEREUSE"] = "1",
            ["DOTNET_CLI_USE_MSBUILD_SERVER"] = "0",
            ["UseSharedCompilation"] = "false",
        };
        var clock = Stopwatch.StartNew();
        (int exitCode, string text) = await ChildProcess.RunAsync(ChildProcess.DotnetHost(), args, s_command, workingDirectory, env);
        output.WriteLine($"dotnet {string.Join(' ', args)}: exit {exitCode} in {clock.Elapsed.TotalSeconds:F1} s");
        Assert.True(exitCode == 0, $"dotnet {string.Join(' ', args)} exited with {exitCode}:\n{text}");
        return text;
    }

    /// <summary>The app's IoUring assemblies came from the packages of this version, restored into its own package folder.</summary>
    private static void AssertResolvedFromPackages(string app, string packages, string version)
    {
        foreach ((_, string id) in s_packages)
        {
            Assert.True(Directory.Exists(Path.Combine(packages, id.ToLowerInvariant(), version)), $"{id} {version} was not restored into {packages}");
        }
        using JsonDocument deps = JsonDocument.Parse(File.ReadAllText(Path.Combine(app, "bin", "Release", RepoFiles.TargetFramework, "App.deps.json")));
        JsonElement libraries = deps.RootElement.GetProperty("libraries");
        foreach ((_, string id) in s_packages)
        {
            Assert.Equal("package", libraries.GetProperty($"{id}/{version}").GetProperty("type").GetString());
        }
    }
}
