using System.Security.Cryptography;
using Google.Protobuf;
using global::Grpc.Core;
using global::Grpc.Net.Client;
using IoUring.AspNetCore.Tests.Support;
using IoUring.Net;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Server.Kestrel.Core;
using Microsoft.Extensions.DependencyInjection;

namespace IoUring.AspNetCore.Tests.Grpc;

/// <summary>
/// gRPC both ways on io_uring: Grpc.AspNetCore served by Kestrel on the io_uring transport over h2c, called by
/// Grpc.Net.Client whose HttpClient connects through <see cref="SocketsHttpHandlerExtensions.UseIoUring"/>.
/// </summary>
public sealed class GrpcOnIoUringTests : IAsyncLifetime
{
    private static readonly TimeSpan s_hangGuard = TimeSpan.FromSeconds(60);

    private readonly IoUringNetwork _network = new(new IoUringNetworkOptions { LoopCount = 2 });
    private TestServer _server = null!;
    private GrpcChannel _channel = null!;

    public async Task InitializeAsync()
    {
        _server = await TestServer.StartAsync(TransportKind.IoUring, app => app.MapGrpcService<EchoService>(), o =>
        {
            o.Protocols = HttpProtocols.Http2;
            o.Services = services => services.AddGrpc(g => g.MaxReceiveMessageSize = 8 << 20);
        });
        _channel = GrpcChannel.ForAddress(_server.BaseAddress, new GrpcChannelOptions
        {
            HttpHandler = new SocketsHttpHandler().UseIoUring(_network),
            MaxReceiveMessageSize = 8 << 20,
        });
    }

    public async Task DisposeAsync()
    {
        _channel.Dispose();
        await _server.DisposeAsync();
        await _network.DisposeAsync();
    }

    private static EchoMessage Message(int sequence, int length)
    {
        byte[] payload = new byte[length];
        new Random(sequence).NextBytes(payload);
        return new EchoMessage { Sequence = sequence, Payload = ByteString.CopyFrom(payload) };
    }

    private static void AssertEchoed(EchoMessage sent, EchoMessage received)
    {
        Assert.Equal(sent.Sequence, received.Sequence);
        Assert.Equal(sent.Payload, received.Payload);
        Assert.Equal(SHA256.HashData(sent.Payload.Span), received.Digest.ToByteArray());
    }

    [Fact]
    public async Task Unary_calls_of_every_size_round_trip_on_one_connection()
    {
        var client = new Echo.EchoClient(_channel);
        int[] lengths = [0, 1, 100, 16_383, 16_384, 16_385, 65_536, 1 << 20, (4 << 20) + 3];
        for (int i = 0; i < lengths.Length; i++)
        {
            EchoMessage sent = Message(i, lengths[i]);
            EchoMessage received = await client.UnaryAsync(sent, deadline: DateTime.UtcNow + s_hangGuard);
            AssertEchoed(sent, received);
        }

        // A failing call is a status, not a broken connection: the next call runs on the same one.
        var error = await Assert.ThrowsAsync<RpcException>(async () => await client.UnaryAsync(new EchoMessage { Sequence = -1 }));
        Assert.Equal(StatusCode.InvalidArgument, error.StatusCode);
        AssertEchoed(Message(99, 10), await client.UnaryAsync(Message(99, 10)));

        Assert.Equal("IoUringConnectionContext", Assert.Single(_server.Connections.All).ContextType);
        Assert.Equal(1, _network.ConnectionCount);
    }

    [Fact]
    public async Task Bidirectional_streams_answer_in_order_while_the_client_still_sends()
    {
        var client = new Echo.EchoClient(_channel);
        const int Count = 400;
        var random = new Random(7);
        EchoMessage[] sent = Enumerable.Range(0, Count).Select(i => Message(i, random.Next(0, 70_000))).ToArray();

        // Two streams at once on the one HTTP/2 connection, each reading while it writes.
        async Task RunAsync()
        {
            using AsyncDuplexStreamingCall<EchoMessage, EchoMessage> call = client.Duplex(deadline: DateTime.UtcNow + s_hangGuard);
            Task reader = Task.Run(async () =>
            {
                int next = 0;
                await foreach (EchoMessage received in call.ResponseStream.ReadAllAsync())
                {
                    AssertEchoed(sent[next++], received);
                }
                Assert.Equal(Count, next);
            });
            foreach (EchoMessage message in sent)
            {
                await call.RequestStream.WriteAsync(message);
            }
            await call.RequestStream.CompleteAsync();
            await reader.WaitAsync(s_hangGuard);
            Assert.Equal(StatusCode.OK, call.GetStatus().StatusCode);
        }

        await Task.WhenAll(RunAsync(), RunAsync()).WaitAsync(s_hangGuard);
        Assert.Equal("IoUringConnectionContext", Assert.Single(_server.Connections.All).ContextType);
        Assert.Equal(1, _network.ConnectionCount);
    }

    private sealed class EchoService : Echo.EchoBase
    {
        public override Task<EchoMessage> Unary(EchoMessage request, ServerCallContext context)
        {
            if (request.Sequence < 0)
            {
                throw new RpcException(new Status(StatusCode.InvalidArgument, "negative sequence"));
            }
            return Task.FromResult(Answer(request));
        }

        public override async Task Duplex(IAsyncStreamReader<EchoMessage> requestStream, IServerStreamWriter<EchoMessage> responseStream, ServerCallContext context)
        {
            await foreach (EchoMessage request in requestStream.ReadAllAsync(context.CancellationToken))
            {
                await responseStream.WriteAsync(Answer(request));
            }
        }

        private static EchoMessage Answer(EchoMessage request)
        {
            EchoMessage answer = request.Clone();
            answer.Digest = ByteString.CopyFrom(SHA256.HashData(request.Payload.Span));
            return answer;
        }
    }
}
