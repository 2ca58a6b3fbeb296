using System.Runtime.Versioning;
using IoUring.Buffers;
using IoUring.Interop;
using IoUring.Loops;
using IoUring.Rings;

namespace IoUring.Net;

/// <summary>
/// The receiving half of an <see cref="IoUringConnection"/>: a RECV that selects buffers from the loop's
/// <see cref="ReceiveBuffers"/> and hands their bytes to <see cref="Input"/>. Receiving pauses (the RECV cancelled)
/// when Input's backlog reaches its pause threshold, and resumes once the reader has caught up.
/// </summary>
/// <remarks>
/// <para>Loop thread only (docs/architecture.md, "Threads and locks"). Owns the receive state and Input's writer side;
/// tells the connection when the peer closed, when receiving ended, and when it failed.</para>
/// <para>With a pause threshold each RECV is capped at what Input can still take, so a paused connection holds at most
/// its threshold plus one buffer: a capped multishot RECV where the kernel can cap one
/// (<see cref="IoUringCapabilities.HasReceiveLimit"/>), else single-shot RECVs of that length, each followed, while
/// bytes remain, by a vectored RECVMSG into spare blocks. Uncapped, a multishot RECV keeps reading until its cancel
/// lands, megabytes past the threshold (BackpressureTests.A_slow_reader_is_never_further_behind_than_the_bound).</para>
/// <para>A multishot RECV armed after a reset arrived can wait for ever on the dead socket, having spent its one look
/// on the bytes queued ahead of the RST; a one-shot hang-up POLL_ADD therefore restarts a waiting RECV once the peer's
/// FIN, reset or an error reaches the socket (ReceiveResetTests.A_reset_while_paused_by_backpressure_...).</para>
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed partial class ConnectionReceiver
{
    private const uint PollErr = 0x8, PollHup = 0x10, PollRdHup = 0x2000; // POLLERR and POLLHUP are always reported
    private const int MaxVector = 8; // spare blocks one vectored RECVMSG fills (64 KiB of 8 KiB blocks)

    private readonly IoUringConnection _connection;
    private readonly RingOwner _owner;
    private readonly int _fd;
    private readonly ConnectionInput _input;
    // Input's pause threshold, which caps each RECV at what Input can take; 0: not capped
    private readonly long _pauseThreshold;
    private readonly bool _singleShot;      // no kernel cap: each RECV is single-shot, its length the cap
    private readonly bool _bundles;         // each receive may fill several ring buffers (IORING_RECVSEND_BUNDLE)
    private bool _armed;            // a RECV is in flight (until its final CQE)
    private bool _cancelling;       // that RECV's cancel is in flight too: one is enough
    private bool _paused;           // Input's backlog reached its pause threshold: backpressure
    private bool _ended;            // FIN, error, the reader went away, or closing
    private bool _backingOff;       // a backoff TIMEOUT is in flight: re-arm when it ends
    private bool _peerHungUp;       // the hang-up poll fired: the peer's FIN or reset (or an error) reached the socket
    private bool _hangUpArmed;      // the hang-up poll is in flight
    private bool _armRetryScheduled; // the loop had no SQE for the RECV: MaybeRearm runs again next iteration
    private uint _armedTag;         // the armed RECV's user_data tag: 0, or VectoredTag for the vectored RECVMSG
    private bool _socketNonEmpty;   // single-shot: the last receive left bytes in the socket (arm a vectored one next)
    // msghdr + MaxVector iovecs of the vectored RECVMSG, made at its first use
    private unsafe Libc.msghdr* _vectorMessage;
    // That RECVMSG's spare blocks (until its CQE) and their lengths, made at its first use like the msghdr: only
    // kernels without the receive cap send it, and every connection would pay for them otherwise.
    private ReceiveBlock[]? _vectorBlocks;
    private int[]? _vectorLengths;
    private int _vectorCount;       // blocks in _vectorBlocks (in flight)
    private int _exhaustionMark = -1; // see ReceiveBuffers.OnExhausted
    private long _bytesReceived;
    private (Action<object?, bool>? Callback, object? State) _backpressureCallback;

    /// <summary>Receives <paramref name="connection"/>'s bytes on <paramref name="fd"/> into a new <see cref="Input"/>,
    /// with <paramref name="owner"/>'s requests; Input pauses receiving at <paramref name="pauseThreshold"/> bytes
    /// (null or 0: never), each RECV capped by what Input can take before that (as a multishot RECV's total where
    /// <paramref name="capabilities"/> allow, else as a single-shot RECV's length).
    /// <paramref name="inlineContinuations"/>: the reader's continuations run on the loop thread.</summary>
    public ConnectionReceiver(IoUringConnection connection, RingOwner owner, int fd, long? pauseThreshold,
        bool inlineContinuations, IoUringCapabilities capabilities)
    {
        _connection = connection;
        _owner = owner;
        _fd = fd;
        _input = new ConnectionInput(this, owner.Loop, pauseThreshold ?? 0, inlineContinuations);
        _pauseThreshold = pauseThreshold ?? 0;
        _singleShot = _pauseThreshold > 0 && !capabilities.HasReceiveLimit;
        // Not with single-shot RECVs: a bundle takes its length as a bound only where the socket's queue length is
        // known (6.15 and 6.16 have bundles but no cap), and the length is what holds the bound there.
        _bundles = capabilities.HasReceiveBundles && !_singleShot;
    }

    /// <summary>What the peer sent (<see cref="IoUringConnection.Input"/>).</summary>
    public ConnectionInput Input => _input;

    /// <summary>FIN, error, the reader went away, or the connection is closing: no more bytes go into Input.</summary>
    public bool Ended => _ended;

    public long BytesReceived => Volatile.Read(ref _bytesReceived);

    /// <summary>See <see cref="IoUringConnection.OnBackpressure"/>. Loop thread.</summary>
    public void SetBackpressureCallback(Action<object?, bool> callback, object? state)
        => _backpressureCallback = (callback, state);

    /// <summary>Arms the RECV (unless paused, ended or closing).</summary>
    public void Start() => MaybeRearm();
}
