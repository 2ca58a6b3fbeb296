using System.Buffers;
using System.Collections;
using System.IO.Pipelines;
using System.Net;
using System.Net.Sockets;
using Microsoft.AspNetCore.Connections;
using Microsoft.AspNetCore.Connections.Features;
using Microsoft.AspNetCore.Http.Features;

namespace IoUring.AspNetCore.Internal;

// The features Kestrel's own transports give, implemented by the context itself (no allocation per feature); any
// other feature, or a replacement of one of these, lives in a dictionary made on first use.
internal sealed partial class IoUringConnectionContext :
    IFeatureCollection,
    IConnectionIdFeature,
    IConnectionTransportFeature,
    IConnectionItemsFeature,
    IMemoryPoolFeature,
    IConnectionLifetimeFeature,
    IConnectionEndPointFeature,
    IConnectionSocketFeature
{
    private static readonly Type[] s_ownFeatures =
    [
        typeof(IConnectionIdFeature),
        typeof(IConnectionTransportFeature),
        typeof(IConnectionItemsFeature),
        typeof(IMemoryPoolFeature),
        typeof(IConnectionLifetimeFeature),
        typeof(IConnectionEndPointFeature),
        typeof(IConnectionSocketFeature),
    ];

    private Dictionary<Type, object?>? _features;   // added features, and replaced (or removed: null) own ones
    private int _revision;
    private string? _connectionId;
    private IDictionary<object, object?>? _items;
    private IDuplexPipe _transportPipe;
    private Socket? _socket;

    bool IFeatureCollection.IsReadOnly => false;

    int IFeatureCollection.Revision => _revision;

    object? IFeatureCollection.this[Type key]
    {
        get
        {
            ArgumentNullException.ThrowIfNull(key);
            if (_features is not null && _features.TryGetValue(key, out object? feature))
            {
                return feature;
            }
            return IsOwnFeature(key) ? this : null;
        }
        set
        {
            ArgumentNullException.ThrowIfNull(key);
            (_features ??= []) [key] = value;
            _revision++;
        }
    }

    // Kestrel asks for features on every request (its request features fall back to these): a dictionary lookup only
    // when features were added, then one cached answer per feature type.
    TFeature? IFeatureCollection.Get<TFeature>() where TFeature : default
    {
        if (_features is not null && _features.TryGetValue(typeof(TFeature), out object? feature))
        {
            return (TFeature?)feature;
        }
        return OwnFeature<TFeature>.Is ? (TFeature)(object)this : default;
    }

    private static class OwnFeature<TFeature>
    {
        public static readonly bool Is = IsOwnFeature(typeof(TFeature));
    }

    private static bool IsOwnFeature(Type type)
    {
        foreach (Type own in s_ownFeatures)
        {
            if (ReferenceEquals(own, type)) // runtime types are unique objects
            {
                return true;
            }
        }
        return false;
    }

    void IFeatureCollection.Set<TFeature>(TFeature? instance) where TFeature : default => ((IFeatureCollection)this)[typeof(TFeature)] = instance;

    IEnumerator<KeyValuePair<Type, object>> IEnumerable<KeyValuePair<Type, object>>.GetEnumerator()
    {
        foreach (Type type in s_ownFeatures)
        {
            if (_features is null || !_features.ContainsKey(type))
            {
                yield return new KeyValuePair<Type, object>(type, this);
            }
        }
        if (_features is not null)
        {
            foreach (KeyValuePair<Type, object?> pair in _features)
            {
                if (pair.Value is not null)
                {
                    yield return new KeyValuePair<Type, object>(pair.Key, pair.Value);
                }
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

    void IConnectionLifetimeFeature.Abort() => Abort(new ConnectionAbortedException("The connection was aborted by the application via IConnectionLifetimeFeature.Abort()."));

    /// <summary>
    /// A <see cref="System.Net.Sockets.Socket"/> over the connection's fd, made on first use, for socket options. It does
    /// not own the fd: the transport closes it. Reading or writing through it bypasses the transport's pipes.
    /// </summary>
    Socket IConnectionSocketFeature.Socket => _socket ??= new Socket(new SafeSocketHandle(_connection.Handle, ownsHandle: false));
}
