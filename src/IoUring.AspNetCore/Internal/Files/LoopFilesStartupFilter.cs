using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.Options;

namespace IoUring.AspNetCore.Internal.Files;

/// <summary>
/// Added by UseIoUring(): a middleware first in the pipeline that gives each request on an io_uring connection the
/// response body feature whose SendFileAsync reads on the loop (<see cref="LoopResponseBodyFeature"/>), so static
/// files, Results.File and every other SendFileAsync caller go through it. Nothing is added when
/// <see cref="IoUringTransportOptions.ReadFilesOnLoops"/> is false; requests on Sockets connections (the fallback) are
/// left alone.
/// </summary>
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
                // Every request pays for this: the indexer, cheaper than the generic virtual Get<T>/Set<T>.
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
