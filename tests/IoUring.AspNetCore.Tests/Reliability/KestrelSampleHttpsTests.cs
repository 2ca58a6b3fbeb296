using System.Net;
using IoUring.AspNetCore.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>The Kestrel sample as users run it over HTTPS: a PFX given with --cert; none given, a clear error.</summary>
public sealed class KestrelSampleHttpsTests(LauncherFixture launcher, ITestOutputHelper output) : IClassFixture<LauncherFixture>, IDisposable
{
    private static readonly TimeSpan s_startup = TimeSpan.FromSeconds(60);
    private readonly DirectoryInfo _work = Directory.CreateTempSubdirectory("iouring-https-");

    public void Dispose() => _work.Delete(recursive: true);

    // The default transport (io_uring); --transport sockets runs the same HTTPS code in the sample.
    [Fact]
    public async Task Kestrel_sample_serves_https_with_the_cert_option()
    {
        string pfx = Path.Combine(_work.FullName, "server.pfx");
        TestCertificate.WritePfx(pfx, "p:ss"); // a colon in the password: only the first colon separates it
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, ["--lifetime", "300"], RepoFiles.Sample("KestrelSample"),
            ["--urls", "https://127.0.0.1:0", "--cert", pfx + ":p:ss"]);

        int port = await child.WaitForKestrelPortAsync(s_startup);
        Assert.Equal("Transport: io_uring", await child.WaitForLineAsync(l => l.StartsWith("Transport:", StringComparison.Ordinal), s_startup));
        using var handler = new SocketsHttpHandler();
        handler.SslOptions.RemoteCertificateValidationCallback = TestCertificate.Pinned;
        using var client = new HttpClient(handler) { BaseAddress = new Uri($"https://127.0.0.1:{port}/"), Timeout = s_startup };
        foreach (Version version in new[] { HttpVersion.Version11, HttpVersion.Version20 })
        {
            using var request = new HttpRequestMessage(HttpMethod.Get, "plaintext") { Version = version, VersionPolicy = HttpVersionPolicy.RequestVersionExact };
            using HttpResponseMessage response = await client.SendAsync(request);
            Assert.Equal(version, response.Version);
            Assert.Equal("Hello, World!", await response.Content.ReadAsStringAsync());
        }
        output.WriteLine(child.Output);
        Assert.Contains($"      Now listening on: https://127.0.0.1:{port}", child.Lines);
    }

    [Fact]
    public async Task Kestrel_sample_with_an_https_url_and_no_certificate_exits_saying_how_to_give_one()
    {
        // HOME is an empty directory: no developer certificate in the user's store for Kestrel to fall back on.
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, ["--lifetime", "300"], RepoFiles.Sample("KestrelSample"),
            ["--urls", "https://127.0.0.1:0"], new Dictionary<string, string> { ["HOME"] = _work.FullName });

        int exitCode = await child.WaitForExitAsync(s_startup);
        output.WriteLine(child.Output);

        Assert.Equal(2, exitCode);
        Assert.StartsWith("An https:// URL needs a server certificate: pass --cert server.pfx[:password], or set Kestrel:Certificates:Default:Path", child.Lines[0]);
        Assert.DoesNotContain(child.Lines, l => l.StartsWith("fail:", StringComparison.Ordinal) || l.StartsWith("Unhandled exception", StringComparison.Ordinal));
    }
}
