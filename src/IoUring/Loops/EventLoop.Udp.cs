namespace IoUring.Loops;

// What the loop's UDP sockets did, for Counters: counted on the loop thread where it happens, except the truncations
// a copy out of a socket's queue finds, on the receiving caller's thread.
public sealed partial class EventLoop
{
    private long _queuedDatagramsTruncated; // any thread: Interlocked

    /// <summary>A UDP socket on this loop took a datagram of <paramref name="bytes"/> from the kernel. Loop
    /// thread.</summary>
    internal void OnDatagramReceived(int bytes)
    {
        _counters.UdpDatagramsReceived++;
        _counters.UdpBytesReceived += bytes;
    }

    /// <summary>The kernel sent <paramref name="datagrams"/> of <paramref name="bytes"/> in all for a UDP socket on
    /// this loop (several: one segmented send). Loop thread.</summary>
    internal void OnDatagramsSent(int datagrams, int bytes)
    {
        _counters.UdpDatagramsSent += datagrams;
        _counters.UdpBytesSent += bytes;
    }

    /// <summary>A UDP socket's receive queue was full: a datagram was dropped. Loop thread.</summary>
    internal void OnDatagramDropped() => _counters.UdpDatagramsDropped++;

    /// <summary>The loop copied a datagram cut into a waiting receive or batch. Loop thread.</summary>
    internal void OnDatagramTruncated() => _counters.UdpDatagramsTruncated++;

    /// <summary>A receive took a datagram cut from a UDP socket's queue. Any thread.</summary>
    internal void OnQueuedDatagramTruncated() => Interlocked.Increment(ref _queuedDatagramsTruncated);

    /// <summary>The kernel took a segmented UDP send with UDP_SEGMENT. Loop thread.</summary>
    internal void OnSegmentOffload() => _counters.UdpSegmentOffloads++;

    /// <summary>A UDP socket's own buffer ring had no buffer for its receive (ENOBUFS): counted with the loop's
    /// (<see cref="EventLoopCounters.BufferRingExhaustions"/>). Loop thread.</summary>
    internal void OnOwnerBuffersExhausted() => _counters.BufferRingExhaustions++;

    /// <summary>A UDP receive held a coalesced burst (UDP_GRO). Loop thread.</summary>
    internal void OnCoalescedReceive() => _counters.UdpCoalescedReceives++;
}
