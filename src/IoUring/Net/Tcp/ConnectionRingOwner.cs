using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>The operation kinds of a connection's requests (the kind bits of their user_data).</summary>
internal static class ConnectionRequestKind
{
    // the RECV (ConnectionReceiver): multishot, or single-shot without the kernel's cap
    public const uint Receive = 1;
    public const uint Cancel = 2;           // ASYNC_CANCEL of one of the connection's requests, by its user_data
    public const uint Send = 3;             // SEND/SENDMSG (ConnectionSender)
    public const uint ReceiveBackoff = 4;   // TIMEOUT before re-arming a receive that found no buffer
    public const uint HangUpPoll = 5;       // one-shot POLL_ADD for the peer's FIN or reset
    public const uint Close = 6;            // CLOSE of the fd, after every other request on it ended
    public const uint SendZeroCopy = 7;     // SEND_ZC/SENDMSG_ZC; the user_data tag is the pin set
    // A file send's requests (FileSender) are the Send kind with a tag other than 0: the kind bits are all taken.

    /// <summary>The user_data tag of a Receive that is a vectored RECVMSG into the receiver's own blocks (the kind bits
    /// are all taken).</summary>
    public const uint VectoredTag = 1;
}

/// <summary>
/// The <see cref="RingOwner"/> of one connection's requests (one GCHandle per connection): routes each completion to
/// the part that owns that request: receiving, sending, or the connection's lifecycle. Also the thread-pool work item
/// that signals the connection closed, queued once when it has closed (<see cref="IoUringConnection.SignalClosed"/>).
/// </summary>
[SupportedOSPlatform("linux")]
internal sealed class ConnectionRingOwner(EventLoop loop, IoUringConnection connection)
    : RingOwner(loop), IThreadPoolWorkItem
{
    void IThreadPoolWorkItem.Execute() => connection.SignalClosed();

    internal override void HandleReceive(uint kind, ReceivedBytes data, uint flags)
        => connection.Receiver.OnReceive(data, flags);

    internal override void HandleCompletion(uint kind, int result, uint flags, ulong userData)
    {
        switch (kind)
        {
            case ConnectionRequestKind.Receive when UserData.Tag(userData) == ConnectionRequestKind.VectoredTag:
                connection.Receiver.OnVectoredReceive(result, flags);
                break;
            case ConnectionRequestKind.Receive: connection.Receiver.OnReceiveEnded(result, flags); break;
            case ConnectionRequestKind.Send when UserData.Tag(userData) != 0:
                connection.Sender.OnFileCompletion(UserData.Tag(userData), result); // a FileSender's request
                break;
            case ConnectionRequestKind.Send: connection.Sender.OnSendCompleted(result); break;
            case ConnectionRequestKind.ReceiveBackoff: connection.Receiver.OnBackoffEnded(); break;
            case ConnectionRequestKind.HangUpPoll: connection.Receiver.OnHangUp(result); break;
            case ConnectionRequestKind.Close: connection.OnFdClosed(); break;
            case ConnectionRequestKind.SendZeroCopy:
                connection.Sender.OnZeroCopySendCompleted(result, flags, UserData.Tag(userData));
                break;
            default: break; // cancel requests: their targets report for themselves
        }
    }

    internal override void HandleException(Exception exception)
    {
        Loop.ReportUnhandled(exception);
        connection.Fail(exception);
    }

    internal override void OnRequestFinished() => connection.CheckCloseProgress();

    internal override void OnFreed()
    {
        connection.Sender.FreeNativeMemory();
        connection.Receiver.FreeNativeMemory();
    }
}
