using System.Buffers;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using System.Text;
using IoUring.Net;
using IoUring.Tests.Support;

namespace IoUring.Tests.Net;

/// <summary>Half-close, reset, abort, listener lifetime and fd hygiene over real loopback sockets (backpressure: <see cref="BackpressureTests"/>).</summary>
[Collection(FdCountingCollection.Name)]
public sealed class LifetimeTests : IAsyncLifetime
{
    private IoUringNetwork _network = null!;
    private IoUringListener _listener = null!;

    public Task InitializeAsync()
    {
        _network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2, MaxReadBufferSize = 64 * 1024 });
        _listener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        return Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        await _listener.DisposeAsync();
        await _network.DisposeAsync();
    }

    private Task<(Socket Client, IoUringConnection Server)> ConnectPairAsync() => LoopbackPairs.ConnectAsync(_listener);

    private static async Task<string> ReadAllAsync(PipeReader reader)
    {
        var text = new StringBuilder();
        while (true)
        {
            ReadResult result = await reader.ReadAsync();
            foreach (ReadOnlyMemory<byte> segment in result.Buffer)
            {
                text.Append(Encoding.ASCII.GetString(segment.Span));
            }
            reader.AdvanceTo(result.Buffer.End);
            if (result.IsCompleted)
            {
                return text.ToString();
            }
        }
    }

    private static void Reset(Socket socket)
    {
        socket.LingerState = new LingerOption(true, 0);
        socket.Close();
    }

    [Fact]
    public async Task Accepted_connections_are_spread_over_the_loops_in_turn()
    {
        // The kernel gives a listening socket's connections to whichever loop's accept it finds first (in practice
        // always the same one); the listener deals them out instead, so every loop serves its share.
        var pairs = new List<(Socket Client, IoUringConnection Server)>();
        try
        {
            for (int i = 0; i < 40; i++)
            {
                pairs.Add(await ConnectPairAsync());
            }
            int[] perLoop = _network.Loops.Select(loop => pairs.Count(p => p.Server.Loop == loop)).ToArray();
            Assert.All(perLoop, n => Assert.Equal(20, n));

            // Each works on the loop it was given.
            foreach ((Socket client, IoUringConnection server) in pairs)
            {
                await client.SendAsync("ping"u8.ToArray());
                ReadResult read = await server.Input.ReadAtLeastAsync(4).AsTask().WaitAsync(TimeSpan.FromSeconds(10));
                Assert.Equal("ping", Encoding.ASCII.GetString(read.Buffer.Slice(0, 4).ToArray()));
                server.Input.AdvanceTo(read.Buffer.GetPosition(4));
            }
        }
        finally
        {
            foreach ((Socket client, IoUringConnection server) in pairs)
            {
                client.Dispose();
                server.Abort();
            }
        }
    }

    [Fact]
    public async Task Client_fin_completes_input_and_the_server_can_still_write()
    {
        var (client, server) = await ConnectPairAsync();
        using (client)
        {
            await client.SendAsync("request"u8.ToArray());
            client.Shutdown(SocketShutdown.Send);
            Assert.Equal("request", await ReadAllAsync(server.Input));

            await server.Output.WriteAsync("response after your FIN"u8.ToArray());
            await server.Output.CompleteAsync();
            byte[] buffer = new byte[100];
            int total = 0, n;
            while ((n = await client.ReceiveAsync(buffer.AsMemory(total))) > 0)
            {
                total += n;
            }
            Assert.Equal("response after your FIN", Encoding.ASCII.GetString(buffer, 0, total));
            // Both directions ended: the connection closes by itself.
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
            Assert.True(server.ConnectionClosed.WaitHandle.WaitOne(TimeSpan.FromSeconds(10)));
        }
    }

    [Fact]
    public async Task Server_fin_after_output_completes_reaches_the_client_and_client_can_still_send()
    {
        var (client, server) = await ConnectPairAsync();
        using (client)
        {
            await server.Output.WriteAsync("bye"u8.ToArray());
            await server.Output.CompleteAsync();
            byte[] buffer = new byte[10];
            Assert.Equal(3, await client.ReceiveAsync(buffer));
            Assert.Equal(0, await client.ReceiveAsync(buffer)); // FIN
            await client.SendAsync("still here"u8.ToArray());
            client.Shutdown(SocketShutdown.Send);
            Assert.Equal("still here", await ReadAllAsync(server.Input));
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        }
    }

    [Fact]
    public async Task Peer_reset_during_a_read_fails_the_input_with_a_reset_error()
    {
        var (client, server) = await ConnectPairAsync();
        Task<ReadResult> pending = server.Input.ReadAsync().AsTask();
        await Task.Delay(50);
        Reset(client);
        var ex = await Assert.ThrowsAsync<IOException>(() => pending.WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.Equal(SocketError.ConnectionReset, Assert.IsType<SocketException>(ex.InnerException).SocketErrorCode);
        await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
    }

    [Fact]
    public async Task Peer_reset_during_a_large_write_ends_the_connection()
    {
        var (client, server) = await ConnectPairAsync();
        Task writer = Task.Run(async () =>
        {
            byte[] chunk = new byte[64 * 1024];
            while (!(await server.Output.WriteAsync(chunk)).IsCompleted)
            {
            }
        });
        await Task.Delay(100); // the client reads nothing: the server's send side fills up
        Reset(client);
        await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        // As with Kestrel's Sockets transport: the writer sees its output completed (a peer that left is not the
        // application's error), and the reader sees the reset.
        await writer.WaitAsync(TimeSpan.FromSeconds(10));
        var ex = await Assert.ThrowsAsync<IOException>(async () => await server.Input.ReadAsync());
        Assert.Equal(SocketError.ConnectionReset, Assert.IsType<SocketException>(ex.InnerException).SocketErrorCode);
    }

    [Fact]
    public async Task Abort_while_sending_resets_the_peer_and_closes_once()
    {
        var (client, server) = await ConnectPairAsync();
        using (client)
        {
            _ = Task.Run(async () =>
            {
                byte[] chunk = new byte[64 * 1024];
                try
                {
                    while (!(await server.Output.WriteAsync(chunk)).IsCompleted)
                    {
                    }
                }
                catch (Exception)
                {
                }
            });
            await Task.Delay(50);
            server.Abort(new InvalidOperationException("first"));
            server.Abort(new InvalidOperationException("second"));
            var readError = await Assert.ThrowsAsync<InvalidOperationException>(async () => await server.Input.ReadAsync());
            Assert.Equal("first", readError.Message);
            await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));

            var ex = await Assert.ThrowsAsync<SocketException>(async () =>
            {
                byte[] buffer = new byte[65536];
                while (await client.ReceiveAsync(buffer) > 0)
                {
                }
            });
            Assert.Equal(SocketError.ConnectionReset, ex.SocketErrorCode);
        }
    }

    [Fact]
    public async Task Disposing_the_listener_leaves_live_connections_working_and_accept_returns_null()
    {
        var (client, server) = await ConnectPairAsync();
        using (client)
        {
            ValueTask<IoUringConnection?> waiting = _listener.AcceptAsync();
            await _listener.DisposeAsync();
            Assert.Null(await waiting);
            Assert.Null(await _listener.AcceptAsync());
            await Assert.ThrowsAnyAsync<SocketException>(async () =>
            {
                using var late = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                await late.ConnectAsync(_listener.LocalEndPoint);
            });

            await client.SendAsync("ping"u8.ToArray());
            ReadResult result = await server.Input.ReadAsync();
            Assert.Equal("ping", Encoding.ASCII.GetString(result.Buffer.ToArray()));
            server.Input.AdvanceTo(result.Buffer.End);
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task ConnectionClosed_fires_when_asked_for_before_the_close_and_is_cancelled_when_asked_for_after()
    {
        var (client1, early) = await ConnectPairAsync();
        var (client2, late) = await ConnectPairAsync();
        var fired = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using CancellationTokenRegistration registration = early.ConnectionClosed.Register(() => fired.TrySetResult());
        Assert.False(early.ConnectionClosed.IsCancellationRequested);
        Reset(client1);
        Reset(client2);
        await early.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        await late.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        await fired.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.True(late.ConnectionClosed.IsCancellationRequested); // first asked for after the close
    }

    [Fact]
    public async Task Closing_completes_Closed_then_cancels_the_token_on_the_thread_pool_never_the_loop()
    {
        var (client, server) = await ConnectPairAsync();
        bool callbackOnPool = false, callbackOnLoop = true, closedBeforeCallback = false;
        var callbackRan = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        using CancellationTokenRegistration registration = server.ConnectionClosed.Register(() =>
        {
            callbackOnPool = Thread.CurrentThread.IsThreadPoolThread;
            callbackOnLoop = server.Loop.IsOnLoopThread;
            closedBeforeCallback = server.Closed.IsCompleted;
            callbackRan.TrySetResult();
        });
        // A synchronous continuation runs on whichever thread completes Closed: it must not be the loop's.
        Task<(bool OnPool, bool OnLoop)> awaiter = server.Closed.ContinueWith(
            _ => (Thread.CurrentThread.IsThreadPoolThread, server.Loop.IsOnLoopThread),
            TaskContinuationOptions.ExecuteSynchronously);
        Reset(client);
        var (onPool, onLoop) = await awaiter.WaitAsync(TimeSpan.FromSeconds(10));
        await callbackRan.Task.WaitAsync(TimeSpan.FromSeconds(10));
        Assert.True(onPool);
        Assert.False(onLoop);
        Assert.True(callbackOnPool);
        Assert.False(callbackOnLoop);
        Assert.True(closedBeforeCallback); // a callback may block on Closed
    }

    [Fact]
    public async Task Disposing_the_network_synchronously_from_a_Closed_continuation_does_not_wait_for_that_connection()
    {
        // A `using var network` in an async method whose last await was the connection's DisposeAsync: the dispose
        // then runs in Closed's continuation, on the thread that completed Closed.
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        Task disposed = server.Closed.ContinueWith(_ => network.Dispose(), TaskContinuationOptions.ExecuteSynchronously);
        Reset(client);
        await disposed.WaitAsync(TimeSpan.FromSeconds(10)); // a hang guard: the dispose waited for its own caller
        Assert.True(server.Closed.IsCompletedSuccessfully);
    }

    [Fact]
    public async Task A_ConnectionClosed_callback_that_blocks_on_the_close_or_the_networks_dispose_returns()
    {
        var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 1 });
        IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client1, first) = await LoopbackPairs.ConnectAsync(listener);
        var (client2, second) = await LoopbackPairs.ConnectAsync(listener);
        var sawClosed = new TaskCompletionSource<bool>(TaskCreationOptions.RunContinuationsAsynchronously);
        var disposed = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        // Blocking in a cancellation callback is poor style, but it must not hang the connection or the network.
        using CancellationTokenRegistration waitsForClosed = first.ConnectionClosed.Register(
            () => sawClosed.TrySetResult(first.DisposeAsync().AsTask().Wait(TimeSpan.FromSeconds(10))));
        using CancellationTokenRegistration disposesNetwork = second.ConnectionClosed.Register(() =>
        {
            network.Dispose();
            disposed.TrySetResult();
        });
        Reset(client1);
        Assert.True(await sawClosed.Task.WaitAsync(TimeSpan.FromSeconds(20)), "the callback waited 10 s for Closed");
        Reset(client2);
        await disposed.Task.WaitAsync(TimeSpan.FromSeconds(10)); // a hang guard
    }

    [Fact]
    public async Task ConnectionClosed_first_asked_for_as_the_network_is_disposed_is_cancelled_when_the_dispose_returns()
    {
        IoUringNetwork network = null!;
        IoUringListener listener = null!;
        // The whole close and the network's dispose land where the first ConnectionClosed read saw the connection open
        // and has not published its token source yet.
        network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop =
            {
                Hooks = new()
                {
                    BeforeClosedTokenSourcePublished = () =>
                    {
                        listener.DisposeAsync().AsTask().Wait();
                        network.Dispose();
                    },
                },
            },
        });
        listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (client, server) = await LoopbackPairs.ConnectAsync(listener);
        using (client)
        {
            // Read on the thread that asked: a cancel left for later would run its callbacks after the dispose, which
            // waits for every ConnectionClosed callback of its connections.
            bool cancelledOnReturn = await Task.Run(() => server.ConnectionClosed.IsCancellationRequested);
            Assert.True(server.Closed.IsCompleted);
            Assert.True(cancelledOnReturn, "the token was not cancelled when the network's dispose returned");
        }
    }

    [Fact]
    public async Task Endpoints_read_after_the_connection_closed_are_its_own()
    {
        var (client, server) = await ConnectPairAsync();
        var clientLocal = (IPEndPoint)client.LocalEndPoint!;
        Reset(client);
        await server.Closed.WaitAsync(TimeSpan.FromSeconds(10));
        // The fd number is free now and likely taken by the next connection.
        var (other, _) = await ConnectPairAsync();
        using (other)
        {
            // First asked for only now: the peer's from the address read at start, the local one a copy of the listener's.
            var remote = Assert.IsType<IPEndPoint>(server.RemoteEndPoint);
            Assert.Equal(clientLocal.Port, remote.Port);
            Assert.Same(remote, server.RemoteEndPoint);
            Assert.Equal(_listener.LocalEndPoint, server.LocalEndPoint);
            Assert.NotSame(_listener.LocalEndPoint, server.LocalEndPoint); // IPEndPoint is mutable: each connection has its own
            Assert.Same(server.LocalEndPoint, server.LocalEndPoint);
        }
    }

    [Theory]
    [InlineData("any")]
    [InlineData("dual")]
    [InlineData("loopback")]
    public async Task An_accepted_connection_reports_the_local_address_the_client_reached(string bind)
    {
        // A listener bound to one address gives its connections that endpoint without asking the kernel; one bound to a
        // wildcard must not: each connection's local address is the one the client connected to.
        IPEndPoint endPoint = bind switch
        {
            "any" => new IPEndPoint(IPAddress.Any, 0),
            "dual" => new IPEndPoint(IPAddress.IPv6Any, 0),
            _ => new IPEndPoint(IPAddress.Loopback, 0),
        };
        await using IoUringListener listener = _network.Listen(endPoint);
        int port = ((IPEndPoint)listener.LocalEndPoint).Port;
        using var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        await client.ConnectAsync(new IPEndPoint(IPAddress.Loopback, port));
        await using IoUringConnection server = (await listener.AcceptAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10)))!;
        var local = Assert.IsType<IPEndPoint>(server.LocalEndPoint);
        Assert.Equal(port, local.Port);
        Assert.Equal(bind == "dual" ? IPAddress.Loopback.MapToIPv6() : IPAddress.Loopback, local.Address);
        Assert.Equal(client.LocalEndPoint, server.RemoteEndPoint is IPEndPoint remote && remote.Address.IsIPv4MappedToIPv6
            ? new IPEndPoint(remote.Address.MapToIPv4(), remote.Port) : server.RemoteEndPoint);
    }

    [Fact]
    public async Task The_peers_fin_and_reset_are_observable_without_reading_input()
    {
        var (finClient, finServer) = await ConnectPairAsync();
        var (rstClient, rstServer) = await ConnectPairAsync();
        var fin = new TaskCompletionSource<bool>();
        var rst = new TaskCompletionSource<bool>();
        finServer.OnPeerClosed((s, reset) => ((TaskCompletionSource<bool>)s!).TrySetResult(reset), fin);
        rstServer.OnPeerClosed((s, reset) => ((TaskCompletionSource<bool>)s!).TrySetResult(reset), rst);
        finClient.Shutdown(SocketShutdown.Send);
        Reset(rstClient);
        Assert.False(await fin.Task.WaitAsync(TimeSpan.FromSeconds(10)));
        Assert.True(await rst.Task.WaitAsync(TimeSpan.FromSeconds(10)));

        // Registered after the fact (the FIN already reached the input): called at once.
        var (lateClient, lateServer) = await ConnectPairAsync();
        lateClient.Shutdown(SocketShutdown.Send);
        ReadResult end = await lateServer.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        Assert.True(end.IsCompleted);
        var late = new TaskCompletionSource<bool>();
        lateServer.OnPeerClosed((s, reset) => ((TaskCompletionSource<bool>)s!).TrySetResult(reset), late);
        Assert.True(late.Task.IsCompleted, "a registration after the FIN is called before it returns");
        Assert.False(await late.Task);

        finClient.Dispose();
        lateClient.Dispose();
        await finServer.DisposeAsync();
        await lateServer.DisposeAsync();
    }

    [Fact]
    public async Task Connecting_after_unbind_is_refused_and_accepted_connections_stay()
    {
        var (client, server) = await ConnectPairAsync();
        using (client)
        {
            await _listener.UnbindAsync();
            using var late = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            var ex = await Assert.ThrowsAsync<SocketException>(async () => await late.ConnectAsync(_listener.LocalEndPoint));
            Assert.Equal(SocketError.ConnectionRefused, ex.SocketErrorCode);
            await client.SendAsync("still"u8.ToArray());
            ReadResult result = await server.Input.ReadAsync();
            Assert.Equal("still", Encoding.ASCII.GetString(result.Buffer.ToArray()));
            server.Input.AdvanceTo(result.Buffer.End);
            await server.DisposeAsync();
        }
    }

    [Fact]
    public async Task Connections_waiting_before_the_listener_starts_are_all_accepted()
    {
        // Systemd socket activation, or any bind under load: clients are queued on the socket before the loops begin
        // accepting. The first loop to start must not hand a connection to a loop whose acceptor does not exist yet
        // (NullReferenceException on the loop, the fd never closed, the client hanging).
        // The hook holds the listener's constructor before each acceptor after the first: the widest the race gets.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 2,
            Loop = new() { Hooks = new() { BeforeAcceptorCreated = i => Thread.Sleep(i == 0 ? 0 : 200) } },
        });
        for (int attempt = 0; attempt < 2; attempt++)
        {
            var socket = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
            socket.Bind(new IPEndPoint(IPAddress.Loopback, 0));
            socket.Listen(64);
            var clients = new List<Socket>();
            for (int i = 0; i < 8; i++)
            {
                var client = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
                await client.ConnectAsync(socket.LocalEndPoint!);
                clients.Add(client);
            }
            // From a thread of its own, as a host's startup does: a thread-pool thread defers the loops' wake-up.
            await using IoUringListener listener = await Task.Factory.StartNew(() => network.Listen(socket, 64), TaskCreationOptions.LongRunning);
            for (int i = 0; i < clients.Count; i++)
            {
                using var timeout = new CancellationTokenSource(TimeSpan.FromSeconds(10));
                await using IoUringConnection? accepted = await listener.AcceptAsync(timeout.Token);
                Assert.NotNull(accepted);
            }
            clients.ForEach(c => c.Dispose());
        }
        Assert.Equal(0, network.Loops.Sum(l => l.Counters.HandlerExceptions));
    }

    [Fact]
    public void Binding_a_port_in_use_fails_with_address_in_use()
    {
        var ex = Assert.Throws<SocketException>(() => _network.Listen(_listener.LocalEndPoint));
        Assert.Equal(SocketError.AddressAlreadyInUse, ex.SocketErrorCode);
    }

    [Fact]
    public async Task Connecting_to_a_closed_port_fails_with_connection_refused()
    {
        using var probe = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        probe.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        EndPoint unused = probe.LocalEndPoint!;
        probe.Close();
        var ex = await Assert.ThrowsAsync<SocketException>(async () => await _network.ConnectAsync(unused));
        Assert.Equal(SocketError.ConnectionRefused, ex.SocketErrorCode);
    }

    [Fact]
    public async Task A_stream_that_owns_its_connection_releases_it_even_when_the_peer_never_reads()
    {
        // HttpClient disposes the stream of a timed-out upload to a stalled server: the connection must not stay open
        // (fd, buffers) for as long as the peer does not read. A NetworkStream's socket releases its fd at once.
        using var peerListener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        peerListener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        peerListener.Listen();
        IoUringConnection connection = await _network.ConnectAsync(peerListener.LocalEndPoint!);
        using Socket peer = await peerListener.AcceptAsync();

        Stream stream = connection.AsStream(ownsConnection: true);
        byte[] chunk = new byte[1 << 20];
        Task writing = Task.Run(async () =>
        {
            for (int i = 0; i < 64; i++) // far more than the socket buffers hold: the sends stall
            {
                await stream.WriteAsync(chunk);
            }
        });
        await Task.WhenAny(writing, Task.Delay(500));
        await stream.DisposeAsync();

        await Eventually.WaitForAsync(() => connection.Closed.IsCompleted);
        Assert.True(connection.Closed.IsCompleted, "the connection was still open 10 s after its owning stream was disposed");
        Assert.Equal(0, _network.ConnectionCount);
        await Assert.ThrowsAnyAsync<Exception>(() => writing); // the writes in progress fail: the output is gone
    }

    private sealed class OtherEndPoint : EndPoint;

    [Theory]
    [InlineData("localhost")] // ::1 and 127.0.0.1: the listener is on the second, whichever order the resolver gives
    [InlineData("127.0.0.1")]
    public async Task Connecting_by_host_name_resolves_it_and_tries_each_address(string host)
    {
        var listening = (IPEndPoint)_listener.LocalEndPoint;
        await using IoUringConnection client = await _network.ConnectAsync(new DnsEndPoint(host, listening.Port));
        await using IoUringConnection server = (await _listener.AcceptAsync())!;
        Assert.Equal(client.LocalEndPoint, server.RemoteEndPoint);

        var unknown = await Assert.ThrowsAnyAsync<SocketException>(async () => await _network.ConnectAsync(new DnsEndPoint("no-such-host.invalid", 80)));
        // The resolver's own answer: HostNotFound, or TryAgain where no DNS server is reachable (a guest without network).
        Assert.Contains(unknown.SocketErrorCode, new[] { SocketError.HostNotFound, SocketError.TryAgain });
        Assert.Equal(2, _network.ConnectionCount);
    }

    [Theory]
    [InlineData(true)]
    [InlineData(false)]
    public async Task A_stream_that_owns_its_connection_closes_it_when_disposed(bool ownsConnection)
    {
        // The peer never closes: only our side can end the connection.
        using var peerListener = new Socket(AddressFamily.InterNetwork, SocketType.Stream, ProtocolType.Tcp);
        peerListener.Bind(new IPEndPoint(IPAddress.Loopback, 0));
        peerListener.Listen();
        IoUringConnection connection = await _network.ConnectAsync(peerListener.LocalEndPoint!);
        using Socket peer = await peerListener.AcceptAsync();

        Stream stream = connection.AsStream(ownsConnection);
        await stream.WriteAsync("last words"u8.ToArray());
        await stream.DisposeAsync();

        // Either way the peer gets what was written, then FIN.
        byte[] buffer = new byte[64];
        var received = new MemoryStream();
        int n;
        while ((n = await peer.ReceiveAsync(buffer.AsMemory()).AsTask().WaitAsync(TimeSpan.FromSeconds(10))) > 0)
        {
            received.Write(buffer, 0, n);
        }
        Assert.Equal("last words", Encoding.ASCII.GetString(received.ToArray()));

        // The fd is released only by the owning stream; otherwise the connection is the caller's to dispose.
        await Eventually.WaitForAsync(() => _network.ConnectionCount == 0);
        Assert.Equal(ownsConnection ? 0 : 1, _network.ConnectionCount);
        if (ownsConnection)
        {
            await connection.Closed.WaitAsync(TimeSpan.FromSeconds(10)); // completes on the thread pool after the count drops
        }
        else
        {
            Assert.False(connection.Closed.IsCompleted);
        }
        await connection.DisposeAsync();
        Assert.Equal(0, _network.ConnectionCount);
    }

    [Fact]
    public async Task Unsupported_endpoints_and_options_are_rejected_with_clear_errors()
    {
        var dns = new DnsEndPoint("localhost", 80);
        Assert.Contains("DnsEndPoint", Assert.Throws<NotSupportedException>(() => _network.Listen(dns)).Message, StringComparison.Ordinal);
        var other = new OtherEndPoint();
        Assert.Contains(nameof(OtherEndPoint), (await Assert.ThrowsAsync<NotSupportedException>(async () => await _network.ConnectAsync(other))).Message, StringComparison.Ordinal);
        var bad = Assert.Throws<ArgumentException>(() => new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 0 }));
        Assert.Equal(nameof(IoUringNetworkOptions.LoopCount), bad.ParamName);
        bad = Assert.Throws<ArgumentException>(() => new IoUringNetwork(new IoUringNetworkOptions { MaxReadBufferSize = 0 }));
        Assert.Equal(nameof(IoUringNetworkOptions.MaxReadBufferSize), bad.ParamName);
    }

    [Fact]
    public async Task Ten_thousand_connect_close_cycles_leave_no_fd_handle_or_block_behind()
    {
        await using var network = new IoUringNetwork(new IoUringNetworkOptions { LoopCount = 2 });
        await using var listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        _ = EchoTests.EchoServerAsync(listener);
        async Task CycleAsync(int i)
        {
            await using IoUringConnection connection = await network.ConnectAsync(listener.LocalEndPoint);
            await connection.Output.WriteAsync(new byte[] { (byte)i });
            await connection.Output.CompleteAsync();
            ReadResult result;
            do
            {
                result = await connection.Input.ReadAsync();
                connection.Input.AdvanceTo(result.Buffer.End);
            }
            while (!result.IsCompleted);
            await connection.Input.CompleteAsync();
        }

        for (int i = 0; i < 200; i++)
        {
            await CycleAsync(i); // warm up pools and lazily opened runtime fds
        }
        await Eventually.WaitForAsync(() => network.ConnectionCount == 0);
        int fds = FdCount.Owned();
        int blocks = network.RentedMemoryBlocks;
        int owners = network.Loops.Sum(l => l.LiveOwners);

        const int Cycles = 10_000, Parallel = 50;
        for (int batch = 0; batch < Cycles / Parallel; batch++)
        {
            await Task.WhenAll(Enumerable.Range(0, Parallel).Select(i => CycleAsync(batch * Parallel + i)));
        }

        await Eventually.WaitForAsync(() => network.ConnectionCount == 0);
        Assert.Equal(0, network.ConnectionCount);
        await Eventually.WaitForAsync(() => FdCount.Owned() <= fds);
        Assert.Equal(fds, FdCount.Owned());
        Assert.Equal(blocks, network.RentedMemoryBlocks);
        await Eventually.WaitForAsync(() => network.Loops.Sum(l => l.LiveOwners) == owners);
        Assert.Equal(owners, network.Loops.Sum(l => l.LiveOwners)); // every connection's and connect's GCHandle was freed
        Assert.All(network.Loops, l => Assert.True(l.InFlight <= 2, $"{l.InFlight} requests still in flight")); // wakeup READ + accept
    }
}
