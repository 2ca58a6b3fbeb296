using System.Globalization;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// One sender's bytes against what <see cref="UdpBulkDevice.Device"/>'s driver was handed, over all its windows: with
/// no queue and a driver that takes every packet, the driver's bytes must be exactly the sent bytes plus <see
/// cref="UdpBulkDevice.HeaderBytes"/> per packet, and its packets per datagram tell whether the kernel segmented a
/// UDP_SEGMENT send before the driver (one packet per datagram) or not (one per send).
/// </summary>
internal sealed class UdpBulkDriverTally
{
    // After "pause": the send in flight completes, so the counts on both sides are final.
    private static readonly TimeSpan Drain = TimeSpan.FromMilliseconds(200);

    private long _sent;
    private DeviceCounters _driver;

    /// <summary>Whether every tally printed so far agreed (false: the run measured something else).</summary>
    public static bool AllAgreed { get; private set; } = true;

    /// <summary><see cref="UdpBulkHarness.Window"/> of <paramref name="sender"/>, with the driver's counters and the
    /// sender's bytes read while it is paused on both sides of it.</summary>
    public BulkSample Window(Child sender, int size, int seconds)
    {
        DeviceCounters before = UdpBulkDevice.Read(sender);
        long sentBefore = sender.Count().Bytes;
        BulkSample sample = UdpBulkHarness.Window(sender, sender, size, seconds);
        Thread.Sleep(Drain);
        _sent += sender.Count().Bytes - sentBefore;
        DeviceCounters driver = UdpBulkDevice.Read(sender) - before;
        _driver = new DeviceCounters(_driver.Bytes + driver.Bytes, _driver.Packets + driver.Packets);
        return sample;
    }

    /// <summary>Prints the tally under the table's rows: the sent bytes, the driver's packets and bytes, whether they
    /// agree and the datagrams per packet.</summary>
    public void Print(int size, string kind)
    {
        long surplus = _driver.Bytes - _driver.Packets * UdpBulkDevice.HeaderBytes - _sent;
        AllAgreed &= surplus == 0 && _sent > 0;
        string verdict = surplus == 0
            ? "agrees"
            : string.Create(CultureInfo.InvariantCulture, $"DISAGREES by {surplus:N0} B");
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"{size,5}  {kind,-13} {UdpBulkDevice.Device}: {_driver.Packets:N0} packets, {_driver.Bytes:N0} B = " +
            $"{_sent:N0} B sent + {UdpBulkDevice.HeaderBytes} B a packet: {verdict}; " +
            $"{(double)_sent / size / _driver.Packets:F2} datagrams a packet"));
    }
}
