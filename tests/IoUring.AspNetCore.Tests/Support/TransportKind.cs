namespace IoUring.AspNetCore.Tests.Support;

/// <summary>The transports the conformance suite runs against.</summary>
public enum TransportKind
{
    /// <summary>Kestrel's own Sockets transport: the reference. A test it fails is a wrong test.</summary>
    Sockets,

    /// <summary>This project's io_uring transport.</summary>
    IoUring,
}
