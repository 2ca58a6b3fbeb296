using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;

namespace IoUring.Benchmarks.Net;

/// <summary>Network namespaces of the benchmarks' own, made and removed with iproute2 (needs root).</summary>
internal static partial class NetworkNamespace
{
    private const int CLONE_NEWNET = 0x40000000;

    /// <summary>Namespace <paramref name="name"/> with a veth pair whose peer is down: packets to 10.77.0.2 are built
    /// and dropped, never delivered (<see cref="ZeroCopySendBenchmarks"/>).</summary>
    public static void Create(string name)
    {
        Run("ip", $"netns del {name}", mayFail: true);
        Run("ip", $"netns add {name}");
        Run("ip", $"-n {name} link add zc0 type veth peer name zc1");
        Run("ip", $"-n {name} link set zc0 mtu 65535 up");
        Run("ip", $"-n {name} addr add 10.77.0.1/24 dev zc0");
        Run("ip", $"-n {name} neigh add 10.77.0.2 lladdr 02:00:00:00:00:02 dev zc0 nud permanent");
    }

    public static void Delete(string name) => Run("ip", $"netns del {name}", mayFail: true);

    /// <summary>A UDP socket made inside namespace <paramref name="name"/> (by a thread that joined it) and connected to <paramref name="target"/>.</summary>
    public static Socket CreateUdpSocket(string name, IPEndPoint target)
    {
        Socket? socket = null;
        Exception? error = null;
        var thread = new Thread(() =>
        {
            try
            {
                using var ns = File.OpenHandle($"/run/netns/{name}");
                if (setns((int)ns.DangerousGetHandle(), CLONE_NEWNET) != 0)
                {
                    throw new IOException($"setns failed: errno {Marshal.GetLastPInvokeError()}");
                }
                socket = new Socket(AddressFamily.InterNetwork, SocketType.Dgram, ProtocolType.Udp) { SendBufferSize = 4 * 1024 * 1024 };
                socket.Connect(target);
            }
            catch (Exception ex)
            {
                error = ex;
            }
        });
        thread.Start();
        thread.Join(); // the thread ends in the namespace; the socket stays in it
        return socket ?? throw new InvalidOperationException("Could not make the socket in the namespace.", error);
    }

    /// <summary>Runs <paramref name="file"/> with <paramref name="arguments"/> (split at spaces); returns its
    /// output, or throws with its errors when it fails (unless <paramref name="mayFail"/>).</summary>
    public static string Run(string file, string arguments, bool mayFail = false)
    {
        var start = new ProcessStartInfo(file, arguments)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
        };
        Process process;
        try
        {
            process = Process.Start(start)!;
        }
        catch (System.ComponentModel.Win32Exception ex)
        {
            throw new InvalidOperationException($"{file} {arguments}: {ex.Message}", ex);
        }
        using (process)
        {
            Task<string> errors = process.StandardError.ReadToEndAsync();
            string output = process.StandardOutput.ReadToEnd();
            process.WaitForExit();
            if (process.ExitCode != 0 && !mayFail)
            {
                throw new InvalidOperationException($"{file} {arguments}: {errors.Result.Trim()}");
            }
            return output;
        }
    }

    [LibraryImport("libc", SetLastError = true)]
    private static partial int setns(int fd, int nstype);
}
