using System.Reflection.Metadata;
using System.Reflection.PortableExecutable;
using System.Security.Cryptography;

// ILCompare A.dll B.dll: every type's fields and every method's IL, attributes and signature, keyed by name. Equal
// output means the two builds run the same code: a change to comments alone (the PDB's line numbers differ) passes,
// any code change fails, also one that only renumbers metadata tokens. Exit code 0 when equal, 1 when not.
if (args.Length != 2)
{
    Console.Error.WriteLine("usage: ILCompare A.dll B.dll");
    return 2;
}
Dictionary<string, string> a = Describe(args[0]);
Dictionary<string, string> b = Describe(args[1]);
int differences = 0;
foreach (string key in a.Keys.Union(b.Keys).Order(StringComparer.Ordinal))
{
    a.TryGetValue(key, out string? left);
    b.TryGetValue(key, out string? right);
    if (left != right && ++differences <= 20)
    {
        Console.WriteLine($"differs: {key}");
    }
}
Console.WriteLine($"{Path.GetFileName(args[0])}: {a.Count} members, {differences} differ");
return differences == 0 ? 0 : 1;

static Dictionary<string, string> Describe(string path)
{
    using FileStream stream = File.OpenRead(path);
    using var pe = new PEReader(stream);
    MetadataReader md = pe.GetMetadataReader();
    var members = new Dictionary<string, string>(StringComparer.Ordinal);
    foreach (TypeDefinitionHandle typeHandle in md.TypeDefinitions)
    {
        TypeDefinition type = md.GetTypeDefinition(typeHandle);
        string typeName = NameOf(md, type);
        members["type " + typeName] = type.Attributes + " " + string.Join(",", type.GetFields().Select(f =>
        {
            FieldDefinition field = md.GetFieldDefinition(f);
            return md.GetString(field.Name) + ":" + Convert.ToHexString(md.GetBlobBytes(field.Signature));
        }));
        int index = 0;
        foreach (MethodDefinitionHandle methodHandle in type.GetMethods())
        {
            MethodDefinition method = md.GetMethodDefinition(methodHandle);
            string body = method.RelativeVirtualAddress == 0
                ? "no body"
                : Convert.ToHexString(SHA256.HashData(pe.GetMethodBody(method.RelativeVirtualAddress).GetILBytes()!));
            string key = $"method {typeName}::{md.GetString(method.Name)}#{index++}";
            members[key] = $"{Convert.ToHexString(md.GetBlobBytes(method.Signature))} {method.Attributes} " +
                $"{method.ImplAttributes} {body}";
        }
    }
    return members;
}

static string NameOf(MetadataReader md, TypeDefinition type)
{
    string name = md.GetString(type.Namespace) + "." + md.GetString(type.Name);
    TypeDefinitionHandle declaring = type.GetDeclaringType();
    return declaring.IsNil ? name : NameOf(md, md.GetTypeDefinition(declaring)) + "+" + name;
}
