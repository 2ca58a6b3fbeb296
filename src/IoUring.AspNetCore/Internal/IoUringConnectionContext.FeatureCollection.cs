using System.Buffers;
using System.Collections;
using System.Diagnostics;
using System.IO.Pipelines;
using System.Net.Sockets;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using IoUring.AspNetCore.Internal.Files;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

// Kestrel's transport features, implemented by the context itself (no allocation per feature); others, and
// replacements, live in _added.
internal sealed partial class IoUringConnectionContext :
    IFeatureCollection,
    IConnectionIdFeature,
    IConnectionTransportFeature,
    IConnectionItemsFeature,
    IMemoryPoolFeature,
    IConnectionLifetimeFeature,
    IConnectionEndPointFeature,
    IConnectionSocketFeature,
    ILoopFilesFeature
{
    // Same list as the interfaces above and Get<TFeature>'s tests (FeatureCollection tests check they agree).
    private static readonly Type[] s_ownFeatures =
    [
        typeof(IConnectionIdFeature),
        typeof(IConnectionTransportFeature),
        typeof(IConnectionItemsFeature),
        typeof(IMemoryPoolFeature),
        typeof(IConnectionLifetimeFeature),
        typeof(IConnectionEndPointFeature),
        typeof(IConnectionSocketFeature),
        typeof(ILoopFilesFeature),
    ];

    // Added features, and replaced (or removed: null) own ones. Kestrel adds a few and asks per request for missing
    // ones: a short array searched by reference beats a dictionary's hashing.
    private KeyValuePair<Type, object?>[]? _added;
    private int _addedCount;
    private int _revision;
    private string? _connectionId;
    private IDictionary<object, object?>? _items;
    private IDuplexPipe _transportPipe;

    bool IFeatureCollection.IsReadOnly => false;

    int IFeatureCollection.Revision => _revision;

    object? IFeatureCollection.this[Type key]
    {
        get
        {
            ArgumentNullException.ThrowIfNull(key);
            int index = IndexOfAdded(key);
            if (index >= 0)
            {
                return _added![index].Value;
            }
            return IsOwnFeature(key) ? this : null;
        }
        set
        {
            ArgumentNullException.ThrowIfNull(key);
            int index = IndexOfAdded(key);
            if (index < 0)
            {
                if (_added is null || _addedCount == _added.Length)
                {
                    Array.Resize(ref _added, Math.Max(8, _addedCount * 2));
                }
                index = _addedCount++;
            }
            _added![index] = new KeyValuePair<Type, object?>(key, value);
            _revision++;
        }
    }

    // Per request: added ones first (they may replace own ones), then type comparisons the JIT folds.
    TFeature? IFeatureCollection.Get<TFeature>() where TFeature : default
    {
        int index = IndexOfAdded(typeof(TFeature));
        if (index >= 0)
        {
            return (TFeature?)_added![index].Value;
        }
        if (typeof(TFeature) == typeof(IConnectionIdFeature) ||
            typeof(TFeature) == typeof(IConnectionTransportFeature) ||
            typeof(TFeature) == typeof(IConnectionItemsFeature) ||
            typeof(TFeature) == typeof(IMemoryPoolFeature) ||
            typeof(TFeature) == typeof(IConnectionLifetimeFeature) ||
            typeof(TFeature) == typeof(IConnectionEndPointFeature) ||
            typeof(TFeature) == typeof(IConnectionSocketFeature) ||
            typeof(TFeature) == typeof(ILoopFilesFeature))
        {
            return (TFeature)(object)this;
        }
        return default;
    }

    // Runtime types are unique objects: compared by reference.
    private int IndexOfAdded(Type key)
    {
        KeyValuePair<Type, object?>[]? added = _added;
        int count = _addedCount;
        Debug.Assert(count <= (added?.Length ?? 0), "_addedCount counts entries of _added");
        for (int i = 0; i < count; i++)
        {
            if (ReferenceEquals(added![i].Key, key))
            {
                return i;
            }
        }
        return -1;
    }

    private static bool IsOwnFeature(Type type)
    {
        foreach (Type own in s_ownFeatures)
        {
            if (ReferenceEquals(own, type))
            {
                return true;
            }
        }
        return false;
    }

    void IFeatureCollection.Set<TFeature>(TFeature? instance) where TFeature : default
        => ((IFeatureCollection)this)[typeof(TFeature)] = instance;

    IEnumerator<KeyValuePair<Type, object>> IEnumerable<KeyValuePair<Type, object>>.GetEnumerator()
    {
        foreach (Type type in s_ownFeatures)
        {
            if (IndexOfAdded(type) < 0)
            {
                yield return new KeyValuePair<Type, object>(type, this);
            }
        }
        for (int i = 0; i < _addedCount; i++)
        {
            KeyValuePair<Type, object?> pair = _added![i];
            if (pair.Value is not null)
            {
                yield return new KeyValuePair<Type, object>(pair.Key, pair.Value);
            }
        }
    }

    IEnumerator IEnumerable.GetEnumerator() => ((IEnumerable<KeyValuePair<Type, object>>)this).GetEnumerator();

    IDuplexPipe IConnectionTransportFeature.Transport
    {
        get => Transport;
        set => Transport = value;
    }

    MemoryPool<byte> IMemoryPoolFeature.MemoryPool => MemoryPool;

    CancellationToken IConnectionLifetimeFeature.ConnectionClosed
    {
        get => ConnectionClosed;
        set => ConnectionClosed = value;
    }

    void IConnectionLifetimeFeature.Abort() => Abort(new ConnectionAbortedException(
        "The connection was aborted by the application via IConnectionLifetimeFeature.Abort()."));

    // Over a duplicate of the fd, disposed at the close (never another connection's socket); I/O through it bypasses
    // the pipes.
    Socket IConnectionSocketFeature.Socket => _connection.Socket;
}
