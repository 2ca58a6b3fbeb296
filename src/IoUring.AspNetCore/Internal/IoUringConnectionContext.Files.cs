using IoUring.AspNetCore.Internal.Files;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

// SendFileAsync on the loop (ILoopFilesFeature): the wrapper of the last body feature asked for is kept, so the
// requests of an HTTP/1.1 connection (one body feature, Kestrel's HttpProtocol) share one.
internal sealed partial class IoUringConnectionContext
{
    private LoopResponseBodyFeature? _loopFiles; // any request's thread: immutable, replaced whole

    IHttpResponseBodyFeature ILoopFilesFeature.WithLoopFiles(IHttpResponseBodyFeature body)
    {
        if (body is LoopResponseBodyFeature)
        {
            return body; // the middleware ran twice (a branch re-running the pipeline)
        }
        LoopResponseBodyFeature? cached = Volatile.Read(ref _loopFiles);
        if (cached is null || !ReferenceEquals(cached.Inner, body))
        {
            cached = new LoopResponseBodyFeature(body, _connection.Loop);
            Volatile.Write(ref _loopFiles, cached);
        }
        return cached;
    }
}
