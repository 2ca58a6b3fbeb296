using IoUring.AspNetCore.Internal;
using IoUring.AspNetCore.Tests.Support;
using Xunit.Abstractions;

namespace IoUring.AspNetCore.Tests.Reliability;

/// <summary>
/// On one CPU the transport's start says that the thread pool's spinning costs CPU there and how to turn it off;
/// nothing on more CPUs or once it is off (docs/deployment.md, "The thread pool's spinning on a one-CPU server").
/// </summary>
public sealed class ThreadPoolSpinningTests(LauncherFixture launcher, ITestOutputHelper output) : IClassFixture<LauncherFixture>
{
    private static readonly TimeSpan s_startup = TimeSpan.FromSeconds(60);

    [Theory]
    [InlineData(1, null, null, true)]
    [InlineData(2, null, null, false)]
    [InlineData(8, "0", null, false)]
    [InlineData(1, "0", null, false)]
    [InlineData(1, "0x0", null, false)]
    [InlineData(1, "46", null, true)]      // hexadecimal, as the runtime reads it: still spinning
    [InlineData(1, "", null, true)]
    [InlineData(1, "46", "0", false)]      // runtimeconfig.json wins over the environment, as in the runtime
    [InlineData(1, "0", "70", true)]
    [InlineData(1, null, 0, false)]
    public void Costs_cpu_on_one_cpu_unless_the_spin_limit_is_zero(int processors, string? environment, object? appContext,
        bool expected) =>
        Assert.Equal(expected, ThreadPoolSpinning.CostsHere(processors, environment, appContext));

    [Fact]
    public async Task Kestrel_sample_on_one_cpu_says_so_at_start_and_is_quiet_once_spinning_is_off()
    {
        IReadOnlyList<string> spinning = await StartLinesAsync(environment: null);
        IReadOnlyList<string> off = await StartLinesAsync(new Dictionary<string, string>
        {
            ["DOTNET_ThreadPool_UnfairSemaphoreSpinLimit"] = "0",
        });

        // The console logger writes "info: Category[EventId]" and the message on the next line.
        int hint = spinning.ToList().IndexOf("info: IoUring.AspNetCore.Transport[106]");
        Assert.True(hint >= 0, "no ThreadPoolSpinsOnOneCpu event on one CPU");
        Assert.Contains("DOTNET_ThreadPool_UnfairSemaphoreSpinLimit=0", spinning[hint + 1]);
        Assert.Contains("info: IoUring.AspNetCore.Transport[102]", spinning); // the start line, also shown by the sample
        Assert.DoesNotContain("info: IoUring.AspNetCore.Transport[106]", off);
        Assert.Contains("info: IoUring.AspNetCore.Transport[102]", off);
    }

    private async Task<IReadOnlyList<string>> StartLinesAsync(IReadOnlyDictionary<string, string>? environment)
    {
        await using ChildProcess child = ChildProcess.StartDotnet(launcher.Path, ["--cpu", "0", "--lifetime", "300"],
            RepoFiles.Sample("KestrelSample"), ["--urls", "http://127.0.0.1:0"], environment);
        await child.WaitForKestrelPortAsync(s_startup);
        await child.WaitForLineAsync(l => l.StartsWith("Transport:", StringComparison.Ordinal), s_startup);
        output.WriteLine(child.Output);
        return child.Lines;
    }
}
