namespace IoUring.Tests.Support;

/// <summary>Payloads for tests that check bytes arrive intact.</summary>
internal static class TestBytes
{
    /// <summary><paramref name="length"/> pseudo-random bytes, the same for the same <paramref name="seed"/>.</summary>
    public static byte[] Pattern(int length, int seed)
    {
        var bytes = new byte[length];
        new Random(seed).NextBytes(bytes);
        return bytes;
    }
}
