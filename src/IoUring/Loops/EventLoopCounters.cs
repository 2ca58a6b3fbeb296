namespace IoUring.Loops;

/// <summary>What one <see cref="EventLoop"/> has done since it started.</summary>
public struct EventLoopCounters
{
    /// <summary>io_uring_enter calls.</summary>
    public long Syscalls { readonly get; internal set; }

    /// <summary>Submission queue entries written.</summary>
    public long Sqes { readonly get; internal set; }

    /// <summary>Completion queue entries handled.</summary>
    public long Cqes { readonly get; internal set; }

    /// <summary>Times the CQ was full and the kernel held completions back.</summary>
    public long CqOverflows { readonly get; internal set; }

    /// <summary>Receives that found their provided buffer ring (the loop's or a UDP socket's) empty.</summary>
    public long BufferRingExhaustions { readonly get; internal set; }

    /// <summary>Receive buffers lost to a bundle's ring entry reused before its completion was handled (that
    /// connection fails). Expected 0.</summary>
    public long ReceiveBuffersLost { readonly get; internal set; }

    /// <summary>eventfd writes by other threads to wake the sleeping loop.</summary>
    public long Wakeups { readonly get; internal set; }

    /// <summary>Exceptions thrown by completion handlers or posted work (the loop kept running).</summary>
    public long HandlerExceptions { readonly get; internal set; }

    /// <summary>Bytes received by this loop's TCP and Unix domain connections (UDP:
    /// <see cref="UdpBytesReceived"/>).</summary>
    public long BytesReceived { readonly get; internal set; }

    /// <summary>Bytes sent by this loop's TCP and Unix domain connections (UDP: <see cref="UdpBytesSent"/>).</summary>
    public long BytesSent { readonly get; internal set; }

    /// <summary>Sends a flushing thread made itself rather than wake the sleeping loop (bytes in
    /// <see cref="BytesSent"/>).</summary>
    public long CallerSends { readonly get; internal set; }

    /// <summary>Zero-copy sends (SEND_ZC, SENDMSG_ZC).</summary>
    public long ZeroCopySends { readonly get; internal set; }

    /// <summary>Of <see cref="ZeroCopySends"/>, those from registered buffers.</summary>
    public long ZeroCopySendsFixed { readonly get; internal set; }

    /// <summary>Zero-copy sends the kernel copied after all (e.g. loopback).</summary>
    public long ZeroCopySendsCopied { readonly get; internal set; }

    /// <summary>Completed <see cref="EventLoop.ReadAsync"/> calls, failed ones included.</summary>
    public long FileReads { readonly get; internal set; }

    /// <summary>Bytes the file reads returned.</summary>
    public long FileBytesRead { readonly get; internal set; }

    /// <summary>Bytes of <see cref="EventLoop.MemoryPool"/> rented now (a level), including blocks zero-copy sends
    /// still pin.</summary>
    public long MemoryPoolRentedBytes { readonly get; internal set; }

    /// <summary>Bytes of that pool registered with the ring as fixed buffers now (a level).</summary>
    public long RegisteredMemoryBytes { readonly get; internal set; }

    /// <summary>Bytes of the loop's receive buffer ring now (a level): 0 until the first receive.</summary>
    public long ReceiveBufferBytes { readonly get; internal set; }

    /// <summary>Datagrams this loop's UDP sockets took from the kernel: handed to receives, queued or
    /// dropped.</summary>
    public long UdpDatagramsReceived { readonly get; internal set; }

    /// <summary>Datagrams the kernel sent for this loop's UDP sockets.</summary>
    public long UdpDatagramsSent { readonly get; internal set; }

    /// <summary>Payload bytes of <see cref="UdpDatagramsReceived"/>, up to
    /// <see cref="Net.IoUringUdpOptions.MaxDatagramSize"/> each.</summary>
    public long UdpBytesReceived { readonly get; internal set; }

    /// <summary>Payload bytes of <see cref="UdpDatagramsSent"/>.</summary>
    public long UdpBytesSent { readonly get; internal set; }

    /// <summary>Datagrams dropped because their socket's receive queue was full
    /// (<see cref="Net.IoUringUdpOptions.ReceiveQueueCapacity"/>); the kernel's own drops are not seen.</summary>
    public long UdpDatagramsDropped { readonly get; internal set; }

    /// <summary>Datagrams handed to a receive cut (<see cref="Net.DatagramResult.Truncated"/>): longer than its buffer
    /// or <see cref="Net.IoUringUdpOptions.MaxDatagramSize"/>.</summary>
    public long UdpDatagramsTruncated { readonly get; internal set; }

    /// <summary>Sends with UDP_SEGMENT (GSO): one SENDMSG for several datagrams.</summary>
    public long UdpSegmentOffloads { readonly get; internal set; }

    /// <summary>Receives that held a coalesced burst of datagrams (UDP_GRO), split back into them.</summary>
    public long UdpCoalescedReceives { readonly get; internal set; }

    /// <summary>Each counter summed, e.g. over the loops of a network.</summary>
    public static EventLoopCounters operator +(EventLoopCounters left, EventLoopCounters right) => new()
    {
        Syscalls = left.Syscalls + right.Syscalls,
        Sqes = left.Sqes + right.Sqes,
        Cqes = left.Cqes + right.Cqes,
        CqOverflows = left.CqOverflows + right.CqOverflows,
        BufferRingExhaustions = left.BufferRingExhaustions + right.BufferRingExhaustions,
        ReceiveBuffersLost = left.ReceiveBuffersLost + right.ReceiveBuffersLost,
        Wakeups = left.Wakeups + right.Wakeups,
        HandlerExceptions = left.HandlerExceptions + right.HandlerExceptions,
        BytesReceived = left.BytesReceived + right.BytesReceived,
        BytesSent = left.BytesSent + right.BytesSent,
        CallerSends = left.CallerSends + right.CallerSends,
        ZeroCopySends = left.ZeroCopySends + right.ZeroCopySends,
        ZeroCopySendsFixed = left.ZeroCopySendsFixed + right.ZeroCopySendsFixed,
        ZeroCopySendsCopied = left.ZeroCopySendsCopied + right.ZeroCopySendsCopied,
        FileReads = left.FileReads + right.FileReads,
        FileBytesRead = left.FileBytesRead + right.FileBytesRead,
        MemoryPoolRentedBytes = left.MemoryPoolRentedBytes + right.MemoryPoolRentedBytes,
        RegisteredMemoryBytes = left.RegisteredMemoryBytes + right.RegisteredMemoryBytes,
        ReceiveBufferBytes = left.ReceiveBufferBytes + right.ReceiveBufferBytes,
        UdpDatagramsReceived = left.UdpDatagramsReceived + right.UdpDatagramsReceived,
        UdpDatagramsSent = left.UdpDatagramsSent + right.UdpDatagramsSent,
        UdpBytesReceived = left.UdpBytesReceived + right.UdpBytesReceived,
        UdpBytesSent = left.UdpBytesSent + right.UdpBytesSent,
        UdpDatagramsDropped = left.UdpDatagramsDropped + right.UdpDatagramsDropped,
        UdpDatagramsTruncated = left.UdpDatagramsTruncated + right.UdpDatagramsTruncated,
        UdpSegmentOffloads = left.UdpSegmentOffloads + right.UdpSegmentOffloads,
        UdpCoalescedReceives = left.UdpCoalescedReceives + right.UdpCoalescedReceives,
    };
}
