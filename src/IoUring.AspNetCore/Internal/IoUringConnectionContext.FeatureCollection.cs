using System.Buffers;
using System.Collections;
using System.IO.Pipelines;
using System.Net.Sockets;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using IoUring.AspNetCore.Internal.Files;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

// The features Kestrel's own transports give, implemented by the context itself (no allocation per feature); any
// other feature, or a replacement of one of these, lives in a short array made on first use (_added).
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
    // The same list as the type tests in Get<TFeature> and the interfaces above (the feature-collection test checks all
    // three agree).
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

    // Added features, and replaced (or removed: null) own ones. Kestrel adds about five per connection and then asks,
    // per request, for features nobody has: a short array searched by reference beats a dictionary's hashing here.
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

    // Kestrel asks for features on every request (its request features fall back to these): the added ones first (they
    // may replace own ones), then type-handle comparisons.
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

    // Feature keys are runtime types (typeof), unique objects: compared by reference.
    private int IndexOfAdded(Type key)
    {
        KeyValuePair<Type, object?>[]? added = _added;
        int count = _addedCount;
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

    /// <summary>
    /// <see cref="IoUring.Net.IoUringConnection.Socket"/>: made on first use over a duplicate of the fd, disposed when
    /// the connection closes (ObjectDisposedException from then on, as with Kestrel's Sockets transport, never another
    /// connection's socket). Reading or writing through it bypasses the transport's pipes.
    /// </summary>
    Socket IConnectionSocketFeature.Socket => _connection.Socket;
}
