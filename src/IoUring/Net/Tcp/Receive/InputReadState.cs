namespace IoUring.Net;

/// <summary>What <see cref="ConnectionInput"/>'s last read result asks of the reader before its next read.</summary>
internal enum InputReadState : byte
{
    None,      // no result outstanding: the next read may start
    Reading,   // a result was returned: AdvanceTo must come before the next read
    Tentative, // a canceled result, or TryRead found nothing: AdvanceTo may come, need not
}
