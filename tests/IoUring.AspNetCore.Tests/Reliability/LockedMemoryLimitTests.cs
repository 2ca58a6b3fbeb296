using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// The Kestrel sample on io_uring as a service runs it: not root (no CAP_IPC_LOCK), under a small RLIMIT_MEMLOCK.
/// io_uring charges a zero-copy send's pinned pages to that limit; a send it cannot charge must go out the copying
/// way, not fail the response.
/// </summary>
[System.Runtime.Versioning.SupportedOSPlatform("linux")]
public sealed class LockedMemoryLimitTests(LauncherFixture launcher, ITestOutputHelper output) : IClassFixture<LauncherFixture>
{
    private const int Nobody = 65534;
    private const int MemlockBytes = 256 * 1024;   // the rings (~80 KiB per loop) fit; a few MiB of pinned pages do not
    private const int Downloads = 16;
    private const long DownloadLength = 20_000_000;
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    [Fact]
    public async Task Large_downloads_complete_when_zero_copy_sends_exceed_the_locked_memory_limit()
    {
        // The sample's build, where the other user can read it (a clone may sit under a directory private to root).
        DirectoryInfo app = Directory.CreateTempSubdirectory("iouring-memlock-");
        string sample = RepoFiles.Sample("KestrelSample");
        foreach (string file in Directory.GetFiles(Path.GetDirectoryName(sample)!))
        {
            File.Copy(file, Path.Combine(app.FullName, Path.GetFileName(file)));
        }
        app.UnixFileMode |= UnixFileMode.GroupRead | UnixFileMode.GroupExecute | UnixFileMode.OtherRead | UnixFileMode.OtherExecute;
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path,
            ["--memlock", MemlockBytes.ToString(System.Globalization.CultureInfo.InvariantCulture), "--user", Nobody.ToString(System.Globalization.CultureInfo.InvariantCulture), "--lifetime", "300"],
            Path.Combine(app.FullName, Path.GetFileName(sample)), ["--urls", "http://127.0.0.1:0"]);
        try
        {
            int port = await child.WaitForKestrelPortAsync(s_hangGuard);
            Assert.Equal("Transport: io_uring", await child.WaitForLineAsync(l => l.StartsWith("Transport:", StringComparison.Ordinal), s_hangGuard));
            Assert.Equal(MemlockBytes.ToString(System.Globalization.CultureInfo.InvariantCulture), MemlockLimit(child.Id));

            // At once: each connection's first large sends go zero-copy (pinned pages charged to the limit) until its
            // first notification reports that loopback copied anyway.
            using var client = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{port}/"), Timeout = s_hangGuard };
            long[] lengths = await Task.WhenAll(Enumerable.Range(0, Downloads).Select(async _ =>
            {
                using HttpResponseMessage response = await client.GetAsync($"download?size={DownloadLength}", HttpCompletionOption.ResponseHeadersRead);
                await using Stream body = await response.Content.ReadAsStreamAsync();
                byte[] buffer = new byte[1 << 16];
                long total = 0;
                int n;
                while ((n = await body.ReadAsync(buffer)) > 0)
                {
                    total += n;
                }
                return total;
            }));

            Assert.All(lengths, length => Assert.Equal(DownloadLength, length));
            Assert.DoesNotContain(child.Lines, l => l.StartsWith("fail:", StringComparison.Ordinal) || l.StartsWith("warn:", StringComparison.Ordinal));
        }
        finally
        {
            output.WriteLine(child.Output);
            await child.DisposeAsync();
            app.Delete(recursive: true);
        }
    }

    /// <summary>The child's soft "Max locked memory" limit in bytes, from /proc.</summary>
    private static string MemlockLimit(int pid)
        => File.ReadLines($"/proc/{pid}/limits").Single(l => l.StartsWith("Max locked memory", StringComparison.Ordinal))
            .Split(' ', StringSplitOptions.RemoveEmptyEntries)[3];
}
