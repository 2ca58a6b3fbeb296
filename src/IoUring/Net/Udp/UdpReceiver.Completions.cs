using System.Net;
using System.Net.Sockets;
using System.Runtime.InteropServices;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

// The RECVMSG's completions (loop thread): each datagram is copied into the oldest waiting receive (or a batch still
// filling) or else queued; an error goes to a waiting receive or the socket's next operation.
internal sealed unsafe partial class UdpReceiver
{
    /// <summary>A completion with a buffer: one datagram (its header, source address and payload).</summary>
    public void OnReceive(ReceivedBytes data, uint flags)
    {
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false; // a 0-byte datagram ends a multishot RECVMSG too (the kernel takes a 0 result for the end)
        }
        try
        {
            foreach (ReadOnlySpan<byte> buffer in data)
            {
                OnDatagram(buffer); // one: receive bundles are not asked for
            }
        }
        finally
        {
            MaybeRearm(); // also when handing it over threw (the loop reports that): the socket keeps receiving
        }
    }

    private void OnDatagram(ReadOnlySpan<byte> buffer)
    {
        int payloadOffset = Datagrams.PayloadOffset + _controlSpace;
        if (buffer.Length < payloadOffset)
        {
            return; // the kernel always writes the header and the name area; nothing else can be read from this
        }
        io_uring_recvmsg_out header = MemoryMarshal.Read<io_uring_recvmsg_out>(buffer);
        // The real name length may exceed the room reserved for it (then the name was cut): never read past the room.
        ReadOnlySpan<byte> name = buffer.Slice(Datagrams.HeaderSize,
            (int)Math.Min(header.namelen, (uint)Datagrams.NameSpace));
        ReadOnlySpan<byte> payload = buffer[payloadOffset..];
        int largest = _largestDatagram; // coalescing, buffers hold 64 KiB: cut here, as the kernel would
        // With MSG_TRUNC asked for, payloadlen is the datagram's real length even when the buffer took less of it.
        int datagramLength = (int)Math.Max(header.payloadlen, (uint)payload.Length);
        int segmentSize = 0, interfaceIndex = 0, localLength = 0;
        Span<byte> localName = stackalloc byte[LocalAddressFormat.IPv6NameSize];
        if (_controlSpace > 0)
        {
            localLength = ControlMessages.Read(
                buffer.Slice(Datagrams.PayloadOffset, (int)Math.Min(header.controllen, (uint)_controlSpace)),
                _localFormat, localName, out segmentSize, out interfaceIndex);
            if (localLength == 0 && _reportsLocalAddresses)
            {
                localLength = _localFormat.WriteUnspecified(localName); // none reported: "any", not a stale one
            }
        }
        var datagram = new ReceivedDatagram(payload, datagramLength, name, localName[..localLength], interfaceIndex);
        if (segmentSize > 0 && datagramLength > segmentSize)
        {
            // A coalesced burst (UDP_GRO): equal datagrams of segmentSize, the last one maybe shorter.
            _coalescedReceives++;
            _owner.Loop.OnCoalescedReceive();
            for (int offset = 0; offset < datagramLength; offset += segmentSize)
            {
                int length = Math.Min(segmentSize, datagramLength - offset);
                ReadOnlySpan<byte> segment = offset < payload.Length
                    ? payload.Slice(offset, Math.Min(length, payload.Length - offset))
                    : default;
                Deliver(datagram with { Payload = segment[..Math.Min(segment.Length, largest)], Length = length });
            }
            return;
        }
        Deliver(datagram with { Payload = payload[..Math.Min(payload.Length, largest)] });
    }

    /// <summary>One datagram: to the oldest waiting receive (or a batch still filling), else the queue.</summary>
    private void Deliver(in ReceivedDatagram datagram)
    {
        _received++;
        _owner.Loop.OnDatagramReceived(datagram.Payload.Length);

        UdpReceiveOperation? completed = null;
        List<(UdpReceiveOperation, Exception)>? failed = null;
        bool pause = false;
        lock (_gate)
        {
            if (_filling is { } filling)
            {
                _filling = null;
                try
                {
                    Append(filling.Batch!, datagram);
                    _filling = filling.Batch!.IsFull ? null : filling;
                    return;
                }
                catch (Exception ex)
                {
                    // One batch given to two receives: the other filled it. This one fails when its completion runs
                    // (SealBatch), and the datagram goes on to the next receive or the queue.
                    filling.FillError = ex;
                }
            }
            while (completed is null && _firstWaiting is { } waiting)
            {
                Unlink(waiting);
                waiting.Completed = true;
                if (waiting.Batch is not { } batch)
                {
                    completed = waiting;
                    break;
                }
                try
                {
                    Append(batch, datagram);
                }
                catch (Exception ex)
                {
                    // One batch given to two receives: the other filled it. This one fails, and the datagram goes on
                    // to the next receive or the queue.
                    (failed ??= []).Add((waiting, ex));
                    continue;
                }
                completed = waiting;
                _filling = batch.IsFull ? null : waiting; // later datagrams join it until its completion runs
            }
            if (completed is null)
            {
                if (!_queue.TryEnqueue(datagram))
                {
                    _dropped++;
                    _owner.Loop.OnDatagramDropped();
                }
                else if (_queue.IsFull && !_closed)
                {
                    _queueFull = true;
                    pause = true;
                }
            }
        }
        if (failed is not null)
        {
            foreach ((UdpReceiveOperation receive, Exception error) in failed)
            {
                receive.CompleteLater(default, error);
            }
        }
        if (completed is not null)
        {
            Exception? error = null;
            DatagramResult result = default;
            try
            {
                if (completed.Batch is null)
                {
                    result = CopyOut(datagram, completed.Buffer.Span, completed.From, completed.Local);
                }
            }
            catch (Exception ex)
            {
                // The caller's memory failed (a disposed MemoryManager, say): the receive ends with that, not never.
                error = ex;
            }
            completed.CompleteLater(result, error);
        }
        if (pause)
        {
            Pause();
        }
    }

    private void Append(UdpDatagramBatch batch, in ReceivedDatagram datagram)
    {
        if (batch.IsFull)
        {
            // Only when one batch was given to two receives at once: the other one filled it.
            throw new InvalidOperationException(
                "The batch is full: another receive that has not completed was given it too. Give each waiting " +
                "receive its own batch.");
        }
        batch.Commit(CopyOut(datagram, batch.NextBuffer, batch.NextAddress, batch.NextLocalAddress));
    }

    /// <summary><see cref="Datagrams.CopyOut"/>, counting a cut datagram on the loop.</summary>
    private DatagramResult CopyOut(in ReceivedDatagram datagram, Span<byte> target, SocketAddress? from,
        SocketAddress? local)
    {
        DatagramResult result = Datagrams.CopyOut(datagram, target, from, local);
        if (result.Truncated)
        {
            _owner.Loop.OnDatagramTruncated();
        }
        return result;
    }

    /// <summary>A RECVMSG completion without a buffer: an error, or its end (cancelled, ENOBUFS).</summary>
    public void OnReceiveEnded(int result, uint flags)
    {
        if ((flags & IORING_CQE_F_MORE) == 0)
        {
            _armed = false;
        }
        switch (-result)
        {
            case Errno.ENOBUFS:
                _owner.Loop.OnOwnerBuffersExhausted();
                // Every buffer was taken. Those given back are published before the next submit; if none came back
                // since the last ENOBUFS, re-arming would fail again at once: wait a little first.
                if (_buffers!.OnExhausted(ref _exhaustionMark))
                {
                    MaybeRearm();
                }
                else
                {
                    BackOff();
                }
                break;
            case <= 0: // a result without a buffer (not expected), or cancelled for a pause or the close
            case Errno.ECANCELED:
            case Errno.EAGAIN:
            case Errno.EINTR:
                MaybeRearm();
                break;
            default:
                // An error of the socket (ICMP: ECONNREFUSED on a connected socket, EHOSTUNREACH, ...): reading it
                // cleared it. It goes to the next operation; receiving goes on.
                Fail(SocketErrors.FromErrno(-result));
                if (IsIcmpError(-result))
                {
                    MaybeRearm();
                }
                else
                {
                    BackOff(); // an error that may persist: do not spin on it
                }
                break;
        }
    }

    private static bool IsIcmpError(int errno) => SocketErrors.ToSocketError(errno) is
        SocketError.ConnectionRefused or SocketError.HostUnreachable or SocketError.NetworkUnreachable or
        SocketError.HostDown or SocketError.NetworkDown or SocketError.MessageSize or SocketError.TimedOut;

    /// <summary>An error for the oldest waiting receive, or else for the socket's next operation.</summary>
    private void Fail(SocketException error)
    {
        UdpReceiveOperation? waiting;
        lock (_gate)
        {
            waiting = _firstWaiting;
            if (waiting is not null)
            {
                Unlink(waiting);
                waiting.Completed = true;
            }
        }
        if (waiting is null)
        {
            _socket.SetPendingError(error);
        }
        else
        {
            waiting.CompleteLater(default, error);
        }
    }
}
