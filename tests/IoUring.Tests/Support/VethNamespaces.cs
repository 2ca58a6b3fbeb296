using System.Diagnostics;
using System.Net;
using System.Runtime.InteropServices;

namespace IoUring.Tests.Support;

/// <summary>
/// Two network namespaces of the test's own joined by a veth pair (a real device with a real MTU, unlike loopback's
/// 64 KiB): <see cref="A"/> at <see cref="AddressA"/>, <see cref="B"/> at <see cref="AddressB"/>. Sockets made by
/// <see cref="Run{T}"/> live in a namespace for good (a socket keeps the namespace it was made in). Dispose deletes
/// both namespaces, and with them the veth pair; those of a killed test process go at the next construction.
/// </summary>
internal sealed partial class VethNamespaces : IDisposable
{
    private const int CLONE_NEWNET = 0x40000000;
    private static int s_next;

    public VethNamespaces(int mtu)
    {
        RemoveLeftovers();
        string id = $"{Environment.ProcessId}-{Interlocked.Increment(ref s_next)}";
        A = $"iou-a-{id}";
        B = $"iou-b-{id}";
        try
        {
            Ip($"netns add {A}");
            Ip($"netns add {B}");
            Ip($"-n {A} link add veth0 mtu {mtu} type veth peer name veth1 netns {B} mtu {mtu}");
            Ip($"-n {A} addr add {AddressA}/24 dev veth0");
            Ip($"-n {B} addr add {AddressB}/24 dev veth1");
            Ip($"-n {A} link set veth0 up");
            Ip($"-n {B} link set veth1 up");
        }
        catch
        {
            Dispose();
            throw;
        }
    }

    public string A { get; }

    public string B { get; }

    public static IPAddress AddressA { get; } = IPAddress.Parse("10.78.0.1");

    public static IPAddress AddressB { get; } = IPAddress.Parse("10.78.0.2");

    /// <summary>Runs <paramref name="make"/> on a thread of its own that joined namespace
    /// <paramref name="name"/>.</summary>
    public static T Run<T>(string name, Func<T> make)
    {
        T result = default!;
        Exception? error = null;
        var thread = new Thread(() =>
        {
            try
            {
                using var ns = File.OpenHandle($"/run/netns/{name}");
                if (setns((int)ns.DangerousGetHandle(), CLONE_NEWNET) != 0)
                {
                    throw new IOException($"setns({name}): errno {Marshal.GetLastPInvokeError()}");
                }
                result = make();
            }
            catch (Exception ex)
            {
                error = ex;
            }
        });
        thread.Start();
        thread.Join(); // the thread ends inside the namespace, never back on another's work
        return error is null ? result : throw new InvalidOperationException($"In namespace {name}.", error);
    }

    public void Dispose()
    {
        Ip($"netns del {A}", mayFail: true);
        Ip($"netns del {B}", mayFail: true);
    }

    /// <summary>Deletes the namespaces of test processes that are gone (killed before their Dispose ran); their
    /// names carry their process id.</summary>
    private static void RemoveLeftovers()
    {
        if (!Directory.Exists("/run/netns"))
        {
            return;
        }
        foreach (string path in Directory.GetFiles("/run/netns", "iou-*"))
        {
            string name = Path.GetFileName(path);
            if (LeftoverName().Match(name) is { Success: true } match
                && !Directory.Exists($"/proc/{match.Groups[1].Value}"))
            {
                Ip($"netns del {name}", mayFail: true);
            }
        }
    }

    [System.Text.RegularExpressions.GeneratedRegex(@"^iou-[ab]-(\d+)-\d+$")]
    private static partial System.Text.RegularExpressions.Regex LeftoverName();

    /// <summary>Runs ip(8) with <paramref name="arguments"/> (e.g. "-n NS addr add ..."); throws with its
    /// errors.</summary>
    public static void Ip(string arguments, bool mayFail = false)
    {
        using Process process = Process.Start(new ProcessStartInfo("ip", arguments) { RedirectStandardError = true })!;
        string errors = process.StandardError.ReadToEnd();
        process.WaitForExit();
        if (process.ExitCode != 0 && !mayFail)
        {
            throw new InvalidOperationException($"ip {arguments}: {errors.Trim()}");
        }
    }

    [LibraryImport("libc", SetLastError = true)]
    private static partial int setns(int fd, int nstype);
}
