using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using IoUring.Net;
using IoUring.Tests.Support;
using static IoUring.Tests.Support.TestBytes;

namespace IoUring.Tests.Net;

/// <summary>
/// <c>Input.CopyToAsync(Output)</c> between connections: received blocks are lent to the Output and sent as they are
/// (no copy into the Output's blocks), consumed only once the Output is done with them, also when the source connection
/// is disposed meanwhile or the copy is cancelled. Returned memory is poisoned, so a block sent after its return shows up.
/// </summary>
public sealed class InputCopyToTests : IAsyncLifetime
{
    private const int Size = 512 * 1024;
    private IoUringNetwork _network = null!;
    private IoUringListener _listener = null!;

    public Task InitializeAsync()
    {
        _network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1, // every connection receives into the one loop's ring: a block returned too early is reused
            MaxReadBufferSize = 1024 * 1024,
            Loop = { Hooks = new() { PoisonReturnedMemory = true } },
        });
        _listener = _network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        return Task.CompletedTask;
    }

    public async Task DisposeAsync()
    {
        await _listener.DisposeAsync();
        await _network.DisposeAsync();
    }

    /// <summary>A source connection whose Input holds all of <paramref name="data"/>, unread.</summary>
    private async Task<(Socket Client, IoUringConnection Server)> SourceHoldingAsync(byte[] data)
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        await client.SendAsync(data);
        await Eventually.WaitForAsync(() => ((ConnectionInput)server.Input).Unconsumed == data.Length);
        return (client, server);
    }

    /// <summary>A destination connection whose peer does not read yet: a large send stays in flight (until the test
    /// gives the socket a larger send buffer and the peer reads).</summary>
    private async Task<(Socket Client, IoUringConnection Server)> StalledDestinationAsync()
    {
        var (client, server) = await LoopbackPairs.ConnectAsync(_listener);
        server.Socket.SendBufferSize = 4096; // with the peer's receive buffer, far less than what is copied
        return (client, server);
    }

    [Fact]
    public async Task Received_blocks_are_sent_as_they_are_and_consumed_once_sent()
    {
        byte[] data = Pattern(Size, seed: 1);
        var (sourceClient, source) = await SourceHoldingAsync(data);
        var (destinationClient, destination) = await StalledDestinationAsync();
        await using (source)
        await using (destination)
        using (sourceClient) // the clients are disposed first: a failure must not leave a graceful close waiting on a stalled peer
        using (destinationClient)
        {
            int rentedBefore = _network.RentedMemoryBlocks;
            Task copy = source.Input.CopyToAsync(destination.Output);
            await Task.Delay(200);
            Assert.False(copy.IsCompleted);
            // Stalled mid-send: the Output rented no block of its own (the base CopyToAsync copies every received block
            // into its blocks), and the source still holds every byte: the Output is sending from its blocks.
            Assert.Equal(rentedBefore, _network.RentedMemoryBlocks);
            Assert.Equal(Size, ((ConnectionInput)source.Input).Unconsumed);

            destination.Socket.SendBufferSize = 1 << 20;
            EchoTests.AssertSameBytes(data, await LoopbackPairs.ReceiveExactlyAsync(destinationClient, Size));
            await Eventually.WaitForAsync(() => ((ConnectionInput)source.Input).Unconsumed == 0);

            sourceClient.Shutdown(SocketShutdown.Send); // the end of the stream ends the copy
            await copy.WaitAsync(TimeSpan.FromSeconds(10));
        }
    }

    [Fact]
    public async Task Disposing_the_source_while_its_blocks_are_sent_keeps_them_until_the_send_is_done()
    {
        byte[] data = Pattern(Size, seed: 2);
        var (sourceClient, source) = await SourceHoldingAsync(data);
        var (destinationClient, destination) = await StalledDestinationAsync();
        var (otherClient, other) = await LoopbackPairs.ConnectAsync(_listener);
        await using (destination)
        await using (other)
        using (sourceClient) // the clients are disposed first: a failure must not leave a graceful close waiting on a stalled peer
        using (destinationClient)
        using (otherClient)
        {
            Task copy = source.Input.CopyToAsync(destination.Output);
            await Task.Delay(200);
            Assert.False(copy.IsCompleted);
            ValueTask disposed = source.DisposeAsync(); // completes its Input while the destination sends from its blocks

            // Another connection on the same loop receives a lot meanwhile: the ring takes spare blocks for it, so a
            // block returned early would be received into (and poisoned when returned) before the destination sent it.
            byte[] otherData = Pattern(4 * Size, seed: 3);
            Task sending = otherClient.SendAsync(otherData);
            long read = 0;
            while (read < otherData.Length)
            {
                ReadResultOf result = await ReadSome(other);
                read += result.Length;
            }
            await sending;

            destination.Socket.SendBufferSize = 1 << 20;
            EchoTests.AssertSameBytes(data, await LoopbackPairs.ReceiveExactlyAsync(destinationClient, Size));
            await copy.WaitAsync(TimeSpan.FromSeconds(10)); // the source's reader completed: the copy ends
            await disposed.AsTask().WaitAsync(TimeSpan.FromSeconds(10));
        }
    }

    [Fact]
    public async Task A_cancelled_copy_still_delivers_every_byte_it_took()
    {
        byte[] data = Pattern(Size, seed: 4);
        var (sourceClient, source) = await SourceHoldingAsync(data);
        var (destinationClient, destination) = await StalledDestinationAsync();
        await using (source)
        await using (destination)
        using (sourceClient) // the clients are disposed first: a failure must not leave a graceful close waiting on a stalled peer
        using (destinationClient)
        {
            using var cts = new CancellationTokenSource();
            Task copy = source.Input.CopyToAsync(destination.Output, cts.Token);
            await Task.Delay(200);
            cts.Cancel();
            await Assert.ThrowsAnyAsync<OperationCanceledException>(() => copy.WaitAsync(TimeSpan.FromSeconds(10)));
            // The unsent bytes were copied into the Output's blocks, so the source consumed them all.
            Assert.Equal(0, ((ConnectionInput)source.Input).Unconsumed);

            // The source's blocks go back and are reused while the destination still sends.
            byte[] more = Pattern(2 * Size, seed: 5);
            await sourceClient.SendAsync(more);
            long read = 0;
            while (read < more.Length)
            {
                read += (await ReadSome(source)).Length;
            }

            destination.Socket.SendBufferSize = 1 << 20;
            EchoTests.AssertSameBytes(data, await LoopbackPairs.ReceiveExactlyAsync(destinationClient, Size));
        }
    }

    [Fact]
    public async Task Disposing_the_source_just_as_a_read_completes_ends_the_copy_quietly()
    {
        var (sourceClient, source) = await LoopbackPairs.ConnectAsync(_listener);
        var (destinationClient, destination) = await LoopbackPairs.ConnectAsync(_listener);
        using (sourceClient)
        using (destinationClient)
        await using (destination)
        {
            byte[] data = Pattern(Size, seed: 6);
            var marker = new object();
            int armed = 0;
            Exception? disposeError = null;
            // Runs as the copy's continuation switches into the execution context it captured: after the read
            // completed (its result taken) and before the copy's next statement (Lend).
            var local = new AsyncLocal<object?>(args =>
            {
                if (args.ThreadContextChanged && ReferenceEquals(args.CurrentValue, marker) && Interlocked.Exchange(ref armed, 0) == 1)
                {
                    try
                    {
                        _ = source.DisposeAsync(); // completes the Input at once, as a proxy disposing the other side would
                    }
                    catch (Exception ex)
                    {
                        disposeError = ex;
                    }
                }
            });
            local.Value = marker;
            Task copy = source.Input.CopyToAsync(destination.Output); // the read waits: nothing was sent yet
            local.Value = null;
            await Task.Delay(100);
            Assert.False(copy.IsCompleted);
            Volatile.Write(ref armed, 1);
            try
            {
                await sourceClient.SendAsync(data);
            }
            catch (SocketException)
            {
                // The source may be closed (RST: unread bytes) before all of it is sent: slow machines, e.g. under qemu.
            }

            Exception? copyError = null;
            try
            {
                await copy.WaitAsync(TimeSpan.FromSeconds(10));
            }
            catch (Exception ex)
            {
                copyError = ex;
            }
            Assert.Null(disposeError);
            Assert.Equal(0, Volatile.Read(ref armed)); // the hook ran
            Assert.True(copyError is null, $"the copy failed: {copyError}");
        }
    }

    [Fact]
    public async Task Completing_the_reader_just_as_a_cancelled_read_returns_ends_the_copy_quietly()
    {
        PipeReader? source = null;
        // Completes the source's reader where a Complete on another thread can land: after the copy saw the reader
        // still open, before it advances past the cancelled result.
        await using var network = new IoUringNetwork(new IoUringNetworkOptions
        {
            LoopCount = 1,
            Loop = { Hooks = new() { AfterCancelledCopyRead = () => source?.Complete() } },
        });
        await using IoUringListener listener = network.Listen(new IPEndPoint(IPAddress.Loopback, 0));
        var (sourceClient, sourceServer) = await LoopbackPairs.ConnectAsync(listener);
        var (destinationClient, destination) = await LoopbackPairs.ConnectAsync(listener);
        using (sourceClient)
        using (destinationClient)
        await using (sourceServer)
        await using (destination)
        {
            source = sourceServer.Input;
            Task copy = source.CopyToAsync(destination.Output);
            source.CancelPendingRead();

            Exception? error = await Record.ExceptionAsync(() => copy.WaitAsync(TimeSpan.FromSeconds(10)));
            Assert.True(error is null or OperationCanceledException, $"the copy failed: {error}");
        }
    }

    private readonly record struct ReadResultOf(long Length);

    private static async Task<ReadResultOf> ReadSome(IoUringConnection connection)
    {
        var result = await connection.Input.ReadAsync().AsTask().WaitAsync(TimeSpan.FromSeconds(20));
        long length = result.Buffer.Length;
        connection.Input.AdvanceTo(result.Buffer.End);
        return new ReadResultOf(length);
    }
}
