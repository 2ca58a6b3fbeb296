using System.Buffers;
using System.Diagnostics;
using System.Net;
using System.Net.Sockets;
using BenchmarkDotNet.Attributes;
using IoUring.Interop;
using IoUring.Loops;
using static IoUring.Interop.IoUringConstants;

namespace IoUring.Benchmarks.Net;

/// <summary>
/// The seed "io_uring zerocopy send" (Begunkov, 2021) reproduced: UDP sends of one buffer, over and over, through a
/// path where the kernel never copies, as plain SEND, as SEND_ZC, and as SEND_ZC from a registered (fixed) buffer.
/// Time per send; MB/s is the size over it. The loop thread does all the work (UDP sends complete inline in
/// io_uring_enter), so time per send is also CPU per send.
/// </summary>
/// <remarks>
/// <para>The path: a veth pair in a network namespace of the benchmark's own (<see cref="Namespace"/>), its peer left
/// down, an address on the up end and a permanent neighbour entry, MTU 65535 (no fragmentation). The kernel builds
/// each packet from the user pages and drops it at the veth (peer down) without copying, as the seed's dummy device
/// does; every notification's REPORT_USAGE says whether the kernel copied, and a run that copied fails.</para>
/// <para>Needs root (namespaces). Command in docs/benchmarks.md: <c>--filter '*ZeroCopySend*'</c>.</para>
/// </remarks>
[MemoryDiagnoser(displayGenColumns: false)]
public class ZeroCopySendBenchmarks
{
    public const int OperationsPerInvoke = 4096;
    private const string Namespace = "iouring-zcbench";
    private const int SendsInFlight = 8; // as the seed's tool (send-zerocopy -n 8)

    public enum SendKind { Copy, ZeroCopy, ZeroCopyFixed }

    [Params(1024, 4096, 16384, 65000)]
    public int Size { get; set; }

    [Params(SendKind.Copy, SendKind.ZeroCopy, SendKind.ZeroCopyFixed)]
    public SendKind Kind { get; set; }

    private EventLoop _loop = null!;
    private Socket _socket = null!;
    private IMemoryOwner<byte> _block = null!;
    private MemoryHandle _pin;
    private Sender _sender = null!;

    [GlobalSetup]
    public void Setup()
    {
        NetworkNamespace.Create(Namespace);
        _socket = NetworkNamespace.CreateUdpSocket(Namespace, new IPEndPoint(IPAddress.Parse("10.77.0.2"), 9));
        // 256 KiB blocks: one block (one registered region) holds the largest send.
        _loop = new EventLoop(new EventLoopOptions { MemoryBlockSize = 256 * 1024 });
        _block = _loop.MemoryPool.Rent();
        _block.Memory.Span.Fill(0x5A);
        _pin = _block.Memory.Pin();
        _sender = new Sender(_loop, (int)_socket.Handle, _pin, Size, Kind);
        _sender.WaitForRegistration(_block.Memory);
        _sender.Run(OperationsPerInvoke); // one round before BenchmarkDotNet's own warm-up
    }

    [GlobalCleanup]
    public void Cleanup()
    {
        Console.WriteLine($"// {Kind} {Size} B: {_sender.Sends} sends, {_sender.Notifications} notifications, {_sender.Copied} reported copied");
        _sender.Dispose();
        _loop.Dispose();
        _pin.Dispose();
        _block.Dispose();
        _socket.Dispose();
        NetworkNamespace.Delete(Namespace);
        if (_sender.Copied != 0)
        {
            throw new InvalidOperationException($"{_sender.Copied} zero-copy sends were copied by the kernel: not the seed's path.");
        }
    }

    [Benchmark(OperationsPerInvoke = OperationsPerInvoke)]
    public void Send() => _sender.Run(OperationsPerInvoke);

    /// <summary>Keeps <see cref="SendsInFlight"/> sends of the same buffer in flight until a run's count is done (and, for zero-copy, notified).</summary>
    private sealed unsafe class Sender(EventLoop loop, int fd, MemoryHandle pin, int size, SendKind kind) : RingHandler(loop)
    {
        private readonly ManualResetEventSlim _done = new(false);
        private ushort _bufferIndex;
        private int _toSubmit;
        private int _toComplete; // results, and for zero-copy notifications too
        private Exception? _fault;

        public long Sends { get; private set; }
        public long Notifications { get; private set; }
        public long Copied { get; private set; }

        public void WaitForRegistration(ReadOnlyMemory<byte> memory)
        {
            if (kind != SendKind.ZeroCopyFixed)
            {
                return;
            }
            var watch = Stopwatch.StartNew();
            while (true)
            {
                var found = new TaskCompletionSource<bool>();
                Loop.Schedule(_ => found.SetResult(Loop.TryGetRegisteredBuffer(memory, out _bufferIndex)), null);
                if (found.Task.Result)
                {
                    return;
                }
                if (watch.Elapsed > TimeSpan.FromSeconds(5))
                {
                    throw new InvalidOperationException("The pool's region was not registered with the ring.");
                }
                Thread.Sleep(10);
            }
        }

        public void Run(int count)
        {
            _toSubmit = count;
            _toComplete = kind == SendKind.Copy ? count : 2 * count;
            _done.Reset();
            Loop.Schedule(static s =>
            {
                var self = (Sender)s!;
                for (int i = 0; i < SendsInFlight && self._toSubmit > 0; i++)
                {
                    self.SubmitOne();
                }
            }, this);
            if (!_done.Wait(30_000))
            {
                throw new TimeoutException($"{_toComplete} completions missing.");
            }
            if (_fault is not null)
            {
                throw new InvalidOperationException("A send failed.", _fault);
            }
        }

        private void SubmitOne()
        {
            _toSubmit--;
            var sqe = new io_uring_sqe
            {
                opcode = kind == SendKind.Copy ? IORING_OP_SEND : IORING_OP_SEND_ZC,
                fd = fd,
                addr = (ulong)pin.Pointer,
                len = (uint)size,
            };
            if (kind != SendKind.Copy)
            {
                sqe.ioprio = IORING_SEND_ZC_REPORT_USAGE;
            }
            if (kind == SendKind.ZeroCopyFixed)
            {
                sqe.ioprio |= IORING_RECVSEND_FIXED_BUF;
                sqe.buf_index = _bufferIndex;
            }
            Submit(sqe, 0);
        }

        protected internal override void OnCompletion(ulong userValue, int result, uint flags)
        {
            if ((flags & IORING_CQE_F_NOTIF) != 0)
            {
                Notifications++;
                Copied += (result & unchecked((int)IORING_NOTIF_USAGE_ZC_COPIED)) != 0 ? 1 : 0;
            }
            else
            {
                Sends++;
                if (result != size)
                {
                    _fault ??= new IOException($"send returned {result} (expected {size})");
                }
                if (_toSubmit > 0)
                {
                    SubmitOne(); // the next send goes as soon as this one's result is in, as the seed's tool does
                }
            }
            if (--_toComplete == 0)
            {
                _done.Set();
            }
        }
    }
}
