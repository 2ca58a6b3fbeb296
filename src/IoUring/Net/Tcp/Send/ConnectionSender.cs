using System.Buffers;
using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Net;

/// <summary>
/// The sending half of an <see cref="IoUringConnection"/>: on the loop, sends what <see cref="ConnectionOutput"/> has
/// flushed, from the blocks it was written to, in one SEND (one block) or SENDMSG (gather); one send in flight at a
/// time, the next taken when its CQE comes or when a flush posts <see cref="OnOutputFlushed"/> (a flush that finds this
/// sender idle and the loop asleep may send itself first, outside the ring: <see cref="ConnectionOutput"/>; what it
/// leaves, and its errors, come here). Large sends use SEND_ZC/SENDMSG_ZC: the result CQE continues the send
/// loop at once, the memory stays pinned until the later notification CQE, and if the kernel reports it copied anyway
/// (loopback) the connection returns to plain sends.
/// </summary>
/// <remarks>
/// Loop thread only (docs/architecture.md, "Threads and locks"). Owns the send state: whether a send is in flight, the
/// pins of the memory the kernel reads, the gather message (native memory, freed by <see cref="FreeNativeMemory"/> once
/// nothing is in flight) and the zero-copy pin sets and notifications.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionSender
{
    private const int MaxIovecs = 64;
    private const int PinSets = 8; // zero-copy sends whose notification may be outstanding at once

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly ConnectionOutput _output;
    private readonly ConnectionSettings _settings;
    private bool _sending;                      // a send is in flight (its result CQE has not come)
    private bool _finished;                     // the send loop ended (Output's sender side completed)
    private MemoryHandle _singlePin;            // a plain send's one segment
    // a plain gather's segments, made at the first: most connections never gather
    private MemoryHandle[] _pins = [];
    private int _pinCount;
    private bool _pinsInArray;
    private unsafe Libc.msghdr* _message;       // msghdr followed by MaxIovecs iovecs, made on first gather
    private bool _ended;
    private long _bytesSent;
    // the user_data of the send the kernel has (0: none), to cancel it at close
    private ulong _sendInFlight;
    private bool _cancelledForUnborrow;         // that send's cancel for a cancelled borrowed write went (one per send)

    // Zero-copy: each SEND_ZC holds one pin set (its user_data tag) until its notification.
    // this connection still tries SEND_ZC (off once the kernel reports it copied)
    private bool _zeroCopy;
    private readonly bool _zeroCopyGather;      // SENDMSG_ZC is available (6.1+)
    private readonly bool _fixedGather;         // SENDMSG_ZC takes registered buffers (6.15+)
    private readonly bool _ignoreCopied;        // test seam: stay zero-copy even where the kernel copies (loopback)
    private readonly ushort _zeroCopyFlags;     // IORING_SEND_ZC_REPORT_USAGE where the kernel has it (6.2+)
    private bool _lastSendZeroCopy;
    // the last zero-copy send could not pin its pages: send these bytes copied
    private bool _copyNextSend;
    private MemoryHandle[][] _pinSets = [];     // per set: memory held until that send's notification
    private int[] _pinSetCounts = [];
    private int[] _pinSetSent = [];             // per set: bytes its send sent, held by Output until the notification
    private int _pinSetsBusy;                   // bit per set awaiting its notification
    private int _notificationsPending;          // zero-copy sends done with the socket, still holding memory

    public ConnectionSender(IoUringConnection connection, RingOwner owner, int fd, bool isTcp, ConnectionOutput output,
        ConnectionSettings settings)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _output = output;
        _settings = settings;
        // Unix domain sockets have no zero-copy send (EOPNOTSUPP).
        IoUringCapabilities caps = settings.Capabilities;
        // Only our pool's blocks outlive Output's Consume while pinned (null: the loop's own pool).
        _zeroCopy = isTcp && settings.ZeroCopySendThreshold is > 0 and < long.MaxValue
            && settings.MemoryPool is null or PinnedBlockMemoryPool
            && caps.HasZeroCopySend;
        // Without SENDMSG_ZC (6.0) only single-segment sends go zero-copy. Without REPORT_USAGE (before 6.2) the kernel
        // cannot say it copied, so a connection over loopback keeps paying for zero-copy: correct, only slower.
        _zeroCopyGather = caps.HasZeroCopySendMsg;
        _fixedGather = caps.HasZeroCopySendMsgFixed;
        _ignoreCopied = settings.IgnoreZeroCopyCopied;
        _zeroCopyFlags = caps.HasZeroCopyReportUsage ? IORING_SEND_ZC_REPORT_USAGE : (ushort)0;
    }

    /// <summary>Whether large sends may still go zero-copy (any thread: a snapshot; it only ever turns
    /// false).</summary>
    public bool MaySendZeroCopy => Volatile.Read(ref _zeroCopy);

    /// <summary>Output completed and sent (FIN queued), or the send loop ended on an error.</summary>
    public bool Ended => _ended;

    /// <summary>Bytes sent: by the ring's sends and by flushing threads themselves
    /// (<see cref="ConnectionOutput"/>).</summary>
    public long BytesSent => Volatile.Read(ref _bytesSent) + _output.BytesSentByCallers;

    /// <summary>The application aborted the connection (any thread): a flush must not send by itself any
    /// more.</summary>
    public bool AbortRequested => _connection.AbortRequested;

    /// <summary>The errno of a send a flushing thread made itself, set before it posts
    /// <see cref="OnCallerSendFailed"/>.</summary>
    public int CallerSendError { get; set; }

    /// <summary>Zero-copy sends whose notification has not arrived: they hold memory, not the fd.</summary>
    public int NotificationsPending => _notificationsPending;

    public int ZeroCopySends { get; private set; }

    public bool ZeroCopyReverted { get; private set; }

    /// <summary>Starts sending (loop thread): whatever Output has flushed, then each time a flush posts
    /// <see cref="OnOutputFlushed"/>.</summary>
    public void Start() => SendNext();

    /// <summary>Output was flushed or completed while the sender waited for it (posted to the loop by
    /// Output).</summary>
    public void OnOutputFlushed() => SendNext();

    /// <summary>
    /// A send a flushing thread made itself failed (posted to the loop by Output, which took the sender's wait for
    /// bytes as a flush's post does): handled as this sender's own send failing, so a reset, a transient error or any
    /// other ends the same way whichever thread's send met it.
    /// </summary>
    public void OnCallerSendFailed()
    {
        if (_sending || _finished)
        {
            return; // closing finished the sender meanwhile
        }
        _lastSendZeroCopy = false; // the errors a zero-copy send has of its own are not this send's
        OnSendResult(-CallerSendError);
    }

    /// <summary>
    /// A borrowed write was cancelled (posted to the loop by Output): its memory may be read only until the send in
    /// flight completes, so that send is cancelled; the next <see cref="SendNext"/> lets Output copy what is left.
    /// </summary>
    public void OnUnborrowRequested()
    {
        if (_finished || !_output.UnborrowRequested)
        {
            return; // the sender is gone, or the write completed meanwhile
        }
        if (!_sending)
        {
            SendNext();
        }
        else if (!_cancelledForUnborrow && _sendInFlight != 0)
        {
            _cancelledForUnborrow = _connection.CancelRequest(_sendInFlight);
            if (!_cancelledForUnborrow)
            {
                // No SQE (the SQ still full after an early submit): again next iteration, or a send to a peer that
                // does not read would keep the cancelled write waiting.
                _owner.Loop.Schedule(s_unborrowAgain, this);
            }
        }
    }

    private static readonly Action<object?> s_unborrowAgain = static s => ((ConnectionSender)s!).OnUnborrowRequested();

    /// <summary>Closing (loop thread): a sender waiting for Output ends now; one with a send in flight ends at its
    /// completion.</summary>
    public void OnClosing()
    {
        if (!_sending)
        {
            Finish(null, peerReset: false);
        }
    }

    /// <summary>Sends what Output has flushed, unless a send is in flight; ends when Output completed and all is
    /// sent.</summary>
    private void SendNext()
    {
        if (_sending || _finished)
        {
            return;
        }
        if (_connection.IsClosing)
        {
            Finish(null, peerReset: false);
            return;
        }
        AwaiterCompletion completion = default;
        try
        {
            switch (_output.TryTake(out SendableBytes bytes, out Exception? writerError, out completion))
            {
                case OutputTake.Bytes:
                    Submit(bytes);
                    _sending = true;
                    break;
                case OutputTake.File:
                    StartFile(_output.QueuedFile!);
                    break;
                case OutputTake.Completed:
                    Finish(writerError, peerReset: false);
                    break;
                default:
                    break; // the next flush posts OnOutputFlushed
            }
        }
        catch (Exception ex)
        {
            Finish(ex, peerReset: false); // no SQE (the loop could not submit to make room): the connection fails
        }
        // A cancelled borrowed write completes only now that the bytes taken are in flight (or the sender finished):
        // its continuation, inline on this thread, may close the connection, which must then see this send and cancel
        // it.
        completion.Run();
    }
}
