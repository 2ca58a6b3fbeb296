using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal.Files;

/// <summary>
/// A connection feature of io_uring connections: its response body features with SendFileAsync reading on the
/// connection's loop. Kestrel's request features fall back to the connection's, so the middleware finds it per request.
/// </summary>
internal interface ILoopFilesFeature
{
    /// <summary><paramref name="body"/> with SendFileAsync on the loop (the same object for the same
    /// <paramref name="body"/> where it can: an HTTP/1.1 connection's requests share one).</summary>
    IHttpResponseBodyFeature WithLoopFiles(IHttpResponseBodyFeature body);
}
