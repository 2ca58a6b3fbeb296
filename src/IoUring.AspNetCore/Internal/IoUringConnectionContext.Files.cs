using IoUring.AspNetCore.Internal.Files;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

// The last wrapper is kept: an HTTP/1.1 connection's requests share one body feature, so they share one wrapper.
internal sealed partial class IoUringConnectionContext
{
    private LoopResponseBodyFeature? _loopFiles; // immutable, replaced whole: read on any request's thread

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
