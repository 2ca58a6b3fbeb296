using System.Net;
using System.Runtime.InteropServices;
using System.Runtime.Versioning;
using System.Threading.Tasks.Sources;
using IoUring.Interop;

namespace IoUring.Net;

/// <summary>
/// One datagram on its way out of an <see cref="IoUringUdpSocket"/>: a copy of its bytes and destination in native
/// memory (a msghdr, one iovec and the sockaddr, then the payload), which the kernel reads until the SENDMSG's CQE.
/// Pooled by the <see cref="UdpSender"/> and reused: steady-state sends allocate nothing.
/// </summary>
/// <remarks>
/// The copy is what lets a send complete at once: the caller's memory is free as soon as the call returns. A caller
/// who waits for the kernel (<see cref="Awaited"/>: too many sends in flight) is completed on the thread pool (this is
/// the work item) with the SENDMSG's result.
/// </remarks>
[SupportedOSPlatform("linux")]
internal sealed unsafe class UdpSendOperation : IValueTaskSource<int>, IThreadPoolWorkItem
{
    private const int NameSpace = 128; // sizeof(struct sockaddr_storage)

    private readonly UdpSender _sender;
    private ManualResetValueTaskSourceCore<int> _core; // mutable struct: never readonly
    private Libc.msghdr* _message; // msghdr, iovec, name
    private byte* _data;
    private int _capacity;
    private int _result;

    public UdpSendOperation(UdpSender sender, ushort index)
    {
        _sender = sender;
        Index = index;
        _message = (Libc.msghdr*)NativeMemory.AllocZeroed((nuint)(sizeof(Libc.msghdr) + sizeof(iovec) + NameSpace));
        _message->msg_iov = (iovec*)(_message + 1);
        _message->msg_iovlen = 1;
    }

    /// <summary>The next (older) send in the sender's stack of sends waiting for the loop.</summary>
    public UdpSendOperation? NextToSubmit;

    /// <summary>Its tag in the SENDMSG's user_data.</summary>
    public ushort Index { get; }

    /// <summary>The caller waits for the kernel's result (else it went on already, and an error goes to the
    /// socket).</summary>
    public bool Awaited { get; private set; }

    public Libc.msghdr* Message => _message;

    public short Version => _core.Version;

    /// <summary>Copies the datagram and its destination (none on a connected socket).</summary>
    public void Prepare(ReadOnlySpan<byte> payload, SocketAddress? to, bool awaited)
    {
        _core.Reset();
        Awaited = awaited;
        if (_capacity < payload.Length)
        {
            int capacity = Math.Max(payload.Length, Math.Max(256, 2 * _capacity));
            _data = (byte*)NativeMemory.Realloc(_data, (nuint)capacity);
            _capacity = capacity;
        }
        payload.CopyTo(new Span<byte>(_data, payload.Length));
        iovec* iov = _message->msg_iov;
        iov->iov_base = (nuint)_data;
        iov->iov_len = (nuint)payload.Length;
        if (to is null)
        {
            _message->msg_name = null;
            _message->msg_namelen = 0;
        }
        else
        {
            byte* name = (byte*)(iov + 1);
            to.Buffer.Span[..to.Size].CopyTo(new Span<byte>(name, NameSpace));
            _message->msg_name = name;
            _message->msg_namelen = (uint)to.Size;
        }
    }

    /// <summary>Gives the kernel's result to the waiting caller, on the thread pool.</summary>
    public void CompleteLater(int result)
    {
        _result = result;
        ThreadPool.UnsafeQueueUserWorkItem(this, preferLocal: false);
    }

    void IThreadPoolWorkItem.Execute()
    {
        if (_result >= 0)
        {
            _core.SetResult(_result);
        }
        else
        {
            _core.SetException(_sender.ErrorOf(-_result));
        }
    }

    public int GetResult(short token)
    {
        try
        {
            return _core.GetResult(token);
        }
        finally
        {
            _sender.Return(this);
        }
    }

    public ValueTaskSourceStatus GetStatus(short token) => _core.GetStatus(token);

    public void OnCompleted(Action<object?> continuation, object? state, short token,
        ValueTaskSourceOnCompletedFlags flags)
        => _core.OnCompleted(continuation, state, token, flags);

    /// <summary>Frees the native memory (once the socket is closed and this operation is back in the pool).</summary>
    public void Free()
    {
        NativeMemory.Free(_data);
        NativeMemory.Free(_message);
        _data = null;
        _message = null;
        _capacity = 0;
    }
}
