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

    /// <summary>Times the kernel reported completions waiting in its overflow list (CQ full).</summary>
    public long CqOverflows { readonly get; internal set; }

    /// <summary>Times a receive found its provided buffer ring empty (ENOBUFS): the loop's, or a UDP socket's
    /// own.</summary>
    public long BufferRingExhaustions { readonly get; internal set; }

    /// <summary>
    /// Receive buffers the loop could not give back: a receive bundle's ring entry was reused before its completion was
    /// handled (which fails that connection). Expected to stay 0; see ReceiveBuffers.
    /// </summary>
    public long ReceiveBuffersLost { readonly get; internal set; }

    /// <summary>eventfd writes made by other threads to wake a sleeping loop.</summary>
    public long Wakeups { readonly get; internal set; }

    /// <summary>Exceptions thrown by completion handlers or posted work (the loop kept running).</summary>
    public long HandlerExceptions { readonly get; internal set; }

    /// <summary>Bytes the connections (TCP, Unix domain sockets) on this loop received from their peers; UDP's are in
    /// <see cref="UdpBytesReceived"/>.</summary>
    public long BytesReceived { readonly get; internal set; }

    /// <summary>Bytes the connections (TCP, Unix domain sockets) on this loop sent to their peers; UDP's are in
    /// <see cref="UdpBytesSent"/>.</summary>
    public long BytesSent { readonly get; internal set; }

    /// <summary>
    /// Sends a connection's flushing thread made itself, outside the ring: the loop slept and no send was in flight, so
    /// a send(2) cost less than waking the loop to submit one. Their bytes are in <see cref="BytesSent"/>.
    /// </summary>
    public long CallerSends { readonly get; internal set; }

    /// <summary>Zero-copy sends (SEND_ZC/SENDMSG_ZC) the connections on this loop made.</summary>
    public long ZeroCopySends { readonly get; internal set; }

    /// <summary>Of <see cref="ZeroCopySends"/>, those from registered (fixed) buffers: the kernel pinned no pages for
    /// them.</summary>
    public long ZeroCopySendsFixed { readonly get; internal set; }

    /// <summary>Zero-copy notifications that said the kernel copied the data after all (loopback, or a device that
    /// cannot send from user pages).</summary>
    public long ZeroCopySendsCopied { readonly get; internal set; }

    /// <summary>File reads (<see cref="EventLoop.ReadAsync"/>) the loop completed, failed ones included.</summary>
    public long FileReads { readonly get; internal set; }

    /// <summary>Bytes the loop's file reads returned.</summary>
    public long FileBytesRead { readonly get; internal set; }

    /// <summary>Bytes of the loop's <see cref="EventLoop.MemoryPool"/> rented now, including blocks that zero-copy
    /// sends still pin until their notification: a level, not a count.</summary>
    public long MemoryPoolRentedBytes { readonly get; internal set; }

    /// <summary>Bytes of the loop's pool registered with its ring as fixed buffers now: a level, not a count.</summary>
    public long RegisteredMemoryBytes { readonly get; internal set; }

    /// <summary>Bytes of the loop's receive buffer ring (the provided buffers TCP receives select from): 0 until its
    /// first connection receives, then the buffer count times their size: a level, not a count.</summary>
    public long ReceiveBufferBytes { readonly get; internal set; }

    /// <summary>Datagrams the UDP sockets on this loop took from the kernel: handed to receives, queued, or
    /// dropped.</summary>
    public long UdpDatagramsReceived { readonly get; internal set; }

    /// <summary>Datagrams the kernel sent for the UDP sockets on this loop.</summary>
    public long UdpDatagramsSent { readonly get; internal set; }

    /// <summary>Payload bytes of <see cref="UdpDatagramsReceived"/>, as far as the sockets' buffers took them
    /// (<see cref="Net.IoUringUdpOptions.MaxDatagramSize"/>).</summary>
    public long UdpBytesReceived { readonly get; internal set; }

    /// <summary>Payload bytes of <see cref="UdpDatagramsSent"/>.</summary>
    public long UdpBytesSent { readonly get; internal set; }

    /// <summary>Datagrams dropped because their socket's receive queue was full
    /// (<see cref="Net.IoUringUdpOptions.ReceiveQueueCapacity"/>); the kernel's own drops are not seen.</summary>
    public long UdpDatagramsDropped { readonly get; internal set; }

    /// <summary>Datagrams handed to a receive cut (<see cref="Net.DatagramResult.Truncated"/>): longer than its buffer,
    /// or than the socket's <see cref="Net.IoUringUdpOptions.MaxDatagramSize"/>.</summary>
    public long UdpDatagramsTruncated { readonly get; internal set; }

    /// <summary>Segmented sends the kernel took with UDP_SEGMENT (GSO): one SENDMSG for all their datagrams.</summary>
    public long UdpSegmentOffloads { readonly get; internal set; }

    /// <summary>Receives that held a coalesced burst of datagrams (UDP_GRO), split back into them.</summary>
    public long UdpCoalescedReceives { readonly get; internal set; }

    /// <summary>Each counter summed: the totals of several loops (a network's), or of loops that are gone and live
    /// ones.</summary>
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
