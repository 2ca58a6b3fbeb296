using System.Net;
using System.Net.Security;
using System.Security.Cryptography;
using System.Security.Cryptography.X509Certificates;

namespace IoUring.AspNetCore.Tests.Support;

/// <summary>
/// A self-signed server certificate made by the test run (CN=localhost, SAN localhost and 127.0.0.1), and the
/// client-side check that pins it: nothing is installed in a certificate store.
/// </summary>
public static class TestCertificate
{
    private static readonly Lazy<X509Certificate2> s_server = new(Create);

    /// <summary>The certificate with its private key, as Kestrel loads it: exported to PFX and imported again.</summary>
    public static X509Certificate2 Server => s_server.Value;

    /// <summary>A validation callback that accepts exactly <see cref="Server"/>.</summary>
    public static RemoteCertificateValidationCallback Pinned { get; } = static (_, certificate, _, _)
        => certificate is not null && certificate.GetCertHashString(HashAlgorithmName.SHA256) == Server.GetCertHashString(HashAlgorithmName.SHA256);

    /// <summary>Writes the certificate as a password-protected PFX file (for a server started as a child process).</summary>
    public static void WritePfx(string path, string password) => File.WriteAllBytes(path, Server.Export(X509ContentType.Pfx, password));

    private static X509Certificate2 Create()
    {
        using var key = ECDsa.Create(ECCurve.NamedCurves.nistP256);
        var request = new CertificateRequest("CN=localhost", key, HashAlgorithmName.SHA256);
        var names = new SubjectAlternativeNameBuilder();
        names.AddDnsName("localhost");
        names.AddIpAddress(IPAddress.Loopback);
        request.CertificateExtensions.Add(names.Build());
        request.CertificateExtensions.Add(new X509BasicConstraintsExtension(certificateAuthority: false, hasPathLengthConstraint: false, pathLengthConstraint: 0, critical: true));
        request.CertificateExtensions.Add(new X509KeyUsageExtension(X509KeyUsageFlags.DigitalSignature, critical: true));
        request.CertificateExtensions.Add(new X509EnhancedKeyUsageExtension([new Oid("1.3.6.1.5.5.7.3.1", "Server Authentication")], critical: false));
        DateTimeOffset now = DateTimeOffset.UtcNow;
        using X509Certificate2 created = request.CreateSelfSigned(now.AddDays(-1), now.AddDays(30));
        // On Linux the key of CreateSelfSigned's certificate is ephemeral; a PFX round trip gives one SslStream can use.
        return X509CertificateLoader.LoadPkcs12(created.Export(X509ContentType.Pfx), password: null);
    }
}
