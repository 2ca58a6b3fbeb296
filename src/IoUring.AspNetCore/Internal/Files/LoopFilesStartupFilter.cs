using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore.Internal.Files;

// First in the pipeline, so every SendFileAsync caller gets the loop's; Sockets connections (the fallback) have no
// ILoopFilesFeature and are left alone.
internal sealed class LoopFilesStartupFilter(IOptions<IoUringTransportOptions> options) : IStartupFilter
{
    public Action<IApplicationBuilder> Configure(Action<IApplicationBuilder> next)
    {
        if (!options.Value.ReadFilesOnLoops)
        {
            return next;
        }
        return app =>
        {
            app.Use(static next => context =>
            {
                // Every request pays for this: the indexer is cheaper than the generic virtual Get<T>/Set<T>.
                IFeatureCollection features = context.Features;
                if (features[typeof(ILoopFilesFeature)] is ILoopFilesFeature files
                    && features[typeof(IHttpResponseBodyFeature)] is IHttpResponseBodyFeature body)
                {
                    features[typeof(IHttpResponseBodyFeature)] = files.WithLoopFiles(body);
                }
                return next(context);
            });
            next(app);
        };
    }
}
