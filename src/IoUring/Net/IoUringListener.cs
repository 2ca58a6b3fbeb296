using System.Net;
using System.Net.Sockets;
using System.Threading.Channels;

namespace IoUring.Net;

/// <summary>
/// A listening socket whose connections are accepted by a multishot ACCEPT on every loop of the network and dealt
/// to the loops in turn (a connection then lives on its loop). <see cref="AcceptAsync"/> hands them out.
/// </summary>
public sealed class IoUringListener : IAsyncDisposable
{
    private readonly Socket _socket;
    private readonly Channel<IoUringConnection> _accepted = Channel.CreateUnbounded<IoUringConnection>(new UnboundedChannelOptions { SingleReader = false, SingleWriter = false });
    private readonly Acceptor[] _acceptors;
    private readonly TaskCompletionSource _acceptorsFreed = new(TaskCreationOptions.RunContinuationsAsynchronously);
    private int _liveAcceptors;
    private int _unbound;

    internal IoUringListener(Socket socket, IReadOnlyList<EventLoop> loops, ConnectionSettings settings)
    {
        _socket = socket;
        LocalEndPoint = socket.LocalEndPoint!;
        int fd = (int)socket.Handle;
        if (settings.NoDelay && socket.AddressFamily != AddressFamily.Unix)
        {
            // Linux copies TCP_NODELAY to accepted sockets: one setsockopt here instead of one per connection.
            socket.NoDelay = true;
        }
        _acceptors = new Acceptor[loops.Count];
        _liveAcceptors = loops.Count;
        for (int i = 0; i < loops.Count; i++)
        {
            var acceptor = new Acceptor(loops[i], this, fd, socket.AddressFamily != AddressFamily.Unix, settings);
            _acceptors[i] = acceptor;
            loops[i].Post(static a => ((Acceptor)a!).Start(), acceptor);
        }
    }

    /// <summary>The bound endpoint (with the port the kernel chose when asked for port 0).</summary>
    public EndPoint LocalEndPoint { get; }

    /// <summary>Fds that accept could not get (EMFILE/ENFILE), summed over the loops.</summary>
    public int FdExhaustions => _acceptors.Sum(a => a.FdExhaustions);

    /// <summary>The next accepted connection, or null once the listener is unbound or disposed.</summary>
    public async ValueTask<IoUringConnection?> AcceptAsync(CancellationToken cancellationToken = default)
    {
        try
        {
            return await _accepted.Reader.ReadAsync(cancellationToken).ConfigureAwait(false);
        }
        catch (ChannelClosedException)
        {
            return null;
        }
    }

    /// <summary>
    /// Stops accepting and closes the listening socket (new connects are refused); <see cref="AcceptAsync"/> returns
    /// null from now on. Accepted connections stay open.
    /// </summary>
    public async ValueTask UnbindAsync()
    {
        if (Interlocked.Exchange(ref _unbound, 1) == 0)
        {
            foreach (Acceptor acceptor in _acceptors)
            {
                try
                {
                    acceptor.Loop.Post(static a => ((Acceptor)a!).Stop(), acceptor);
                }
                catch (ObjectDisposedException)
                {
                    acceptor.Stop(); // its loop has stopped (cancelling the accept); nothing else touches the acceptor now
                }
            }
            _accepted.Writer.TryComplete();
            // Connections accepted but never handed out belong to nobody: close them.
            while (_accepted.Reader.TryRead(out IoUringConnection? orphan))
            {
                orphan.Abort();
            }
        }
        // The listening fd is closed only after every accept request on it has completed.
        await _acceptorsFreed.Task.ConfigureAwait(false);
        _socket.Dispose();
    }

    /// <summary>Same as <see cref="UnbindAsync"/>.</summary>
    public ValueTask DisposeAsync() => UnbindAsync();

    private int _nextAcceptor;

    /// <summary>The acceptor (and so the loop) the next accepted connection goes to: round robin.</summary>
    internal Acceptor NextAcceptor() => _acceptors[(int)((uint)Interlocked.Increment(ref _nextAcceptor) % (uint)_acceptors.Length)];

    internal void Enqueue(IoUringConnection connection)
    {
        if (!_accepted.Writer.TryWrite(connection))
        {
            connection.Abort();
        }
    }

    internal void OnAcceptorFreed()
    {
        if (Interlocked.Decrement(ref _liveAcceptors) == 0)
        {
            _acceptorsFreed.TrySetResult();
        }
    }
}
