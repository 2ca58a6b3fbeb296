using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal.Files;

// Kestrel's request features fall back to the connection's, so the middleware finds this per request.
internal interface ILoopFilesFeature
{
    /// <summary><paramref name="body"/> with SendFileAsync on the connection's loop.</summary>
    IHttpResponseBodyFeature WithLoopFiles(IHttpResponseBodyFeature body);
}
