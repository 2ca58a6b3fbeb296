using System.Runtime.Versioning;
using IoUring.Loops;

namespace IoUring.Net;

/// <summary>
/// The <see cref="RingOwner"/> of one connection's requests: routes each completion to receiving, sending or the
/// lifecycle. Also the thread-pool work item queued once closed (<see cref="IoUringConnection.SignalClosed"/>).
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
