using System.Diagnostics;
using System.Globalization;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using IoUring.Interop;
using Xunit.Abstractions;

namespace IoUring.Tests.Abi;

/// <summary>
/// Compares every interop struct layout and every constant in IoUring.Interop with &lt;linux/io_uring.h&gt;,
/// &lt;errno.h&gt; and glibc's headers as printed by abi_dump.c, for each <see cref="AbiTarget"/>: this machine's gcc, and
/// arm64 (cross-compiled, run under qemu-user). The C# layouts are explicit, so one set of bindings must match both;
/// a value that differs by architecture is a pair of constants suffixed _X64 and _Arm64, each checked on its own.
/// </summary>
public sealed class AbiContractTests(AbiDumpFixture dump, ITestOutputHelper output) : IClassFixture<AbiDumpFixture>
{
    // C# names that deliberately have no counterpart in the kernel headers, with the reason.
    // Anything else abi_dump.c does not print fails the test, so a new binding can't skip the check.
    private static readonly Dictionary<string, string> NotInHeader = new(StringComparer.Ordinal)
    {
        ["LibcName"] = "the library Libc binds, not a kernel constant",
    };

    // Every const of these classes and their nested types is checked, Libc's too: glibc only names the kernel's values,
    // and Linux's differ by architecture for some (syscall numbers, and O_*, MAP_*, SO_* on some architectures).
    private static readonly Type[] ConstantClasses = [typeof(IoUringConstants), typeof(Errno), typeof(Libc)];

    [Fact]
    public void Struct_sizes_are_the_documented_kernel_sizes()
    {
        // Sizes from the io_uring man pages and uapi header comments; holds without gcc.
        var failures = new List<string>();
        Expect<io_uring_sqe>(64);
        Expect<io_uring_cqe>(16);
        Expect<io_uring_params>(120);
        Expect<io_sqring_offsets>(40);
        Expect<io_cqring_offsets>(40);
        Expect<io_uring_buf>(16);
        Expect<io_uring_buf_reg>(40);
        Expect<io_uring_rsrc_update>(16);
        Expect<io_uring_rsrc_register>(32);
        Expect<io_uring_rsrc_update2>(32);
        Expect<io_uring_getevents_arg>(24);
        Expect<__kernel_timespec>(16);
        Expect<io_uring_probe>(16);
        Expect<io_uring_probe_op>(8);
        Expect<io_uring_recvmsg_out>(16);
        Expect<iovec>(16);
        Assert.True(failures.Count == 0, string.Join('\n', failures));

        void Expect<T>(int size)
            where T : unmanaged
        {
            if (Unsafe.SizeOf<T>() != size || Marshal.SizeOf<T>() != size)
            {
                failures.Add($"sizeof({typeof(T).Name}): documented {size}, C# Unsafe.SizeOf {Unsafe.SizeOf<T>()}, Marshal.SizeOf {Marshal.SizeOf<T>()}");
            }
        }
    }

    [Theory]
    [InlineData(AbiTarget.Native)]
    [InlineData(AbiTarget.Arm64)]
    public void Every_interop_struct_and_field_matches_the_header(AbiTarget target)
    {
        HeaderAbi abi = dump.For(target);
        var failures = new List<string>();
        int compared = 0;
        output.WriteLine($"{target}: {abi.Built}; arch {abi.Arch}, linux/io_uring.h {abi.Header}; probes built: {string.Join(' ', abi.Defines)}");

        foreach (Type type in InteropStructs())
        {
            string name = type.Name;
            if (NotInHeader.TryGetValue(name, out string? reason))
            {
                output.WriteLine($"not compared: struct {name} ({reason})");
                continue;
            }
            int unsafeSize = (int)typeof(Unsafe).GetMethod(nameof(Unsafe.SizeOf))!.MakeGenericMethod(type).Invoke(null, null)!;
            if (!abi.Values.TryGetValue($"sizeof({name})", out long headerSize))
            {
                failures.Add($"abi_dump.c does not print struct {name}: add it, or list it in NotInHeader with a reason");
                continue;
            }
            compared++;
            if (unsafeSize != headerSize || Marshal.SizeOf(type) != headerSize)
            {
                failures.Add($"sizeof({name}): C# {unsafeSize} (Marshal {Marshal.SizeOf(type)}), header {headerSize}");
            }

            foreach (FieldInfo field in type.GetFields(BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic))
            {
                string key = $"{name}.{field.Name}";
                long offset = Marshal.OffsetOf(type, field.Name).ToInt64();
                long size = Marshal.SizeOf(field.FieldType); // a fixed buffer's generated struct has the array's size
                if (abi.Within.TryGetValue(key, out string? container))
                {
                    // An older header: these bytes have another name there, or are still reserved.
                    long start = abi.Values[$"offsetof({container})"];
                    long end = start + abi.Values[$"sizeof({container})"];
                    compared++;
                    if (offset < start || offset + size > end)
                    {
                        failures.Add($"{key}: C# bytes [{offset}, {offset + size}) are outside the header's {container} [{start}, {end})");
                    }
                    string state = abi.Missing.Contains(key) ? "not in this header" : "laid out differently in this header";
                    output.WriteLine($"older header: {key} is {state}; checked it lies within {container}");
                }
                else if (abi.Values.TryGetValue($"offsetof({key})", out long headerOffset))
                {
                    compared += 2;
                    if (offset != headerOffset)
                    {
                        failures.Add($"offsetof({key}): C# {offset}, header {headerOffset}");
                    }
                    long headerFieldSize = abi.Values[$"sizeof({key})"];
                    if (size != headerFieldSize)
                    {
                        failures.Add($"sizeof({key}): C# {size}, header {headerFieldSize}");
                    }
                }
                else if (abi.Missing.Contains(key))
                {
                    output.WriteLine($"skipped: {key} is not in this header");
                }
                else
                {
                    failures.Add($"abi_dump.c does not print {key}: add it (guarded by a probe if newer than the 6.1 header)");
                }
            }
        }

        output.WriteLine($"{target}: compared {compared} struct sizes, field offsets and field sizes");
        Assert.True(failures.Count == 0, string.Join('\n', failures));
    }

    [Theory]
    [InlineData(AbiTarget.Native)]
    [InlineData(AbiTarget.Arm64)]
    public void Every_constant_matches_the_header(AbiTarget target)
    {
        HeaderAbi abi = dump.For(target);
        var failures = new List<string>();
        int compared = 0;
        output.WriteLine($"{target}: {abi.Built}; arch {abi.Arch}, linux/io_uring.h {abi.Header}");

        const BindingFlags Declared = BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static | BindingFlags.DeclaredOnly;
        IEnumerable<FieldInfo> constants = ConstantClasses.SelectMany(WithNested)
            .SelectMany(holder => holder.GetFields(Declared).Where(f => f.IsLiteral));
        foreach (FieldInfo field in constants)
        {
            Type holder = field.DeclaringType!;
            string name = field.Name;
            string key = name;
            // NAME_<Architecture> holds NAME's value on that architecture only: compared with that architecture's header.
            int cut = name.LastIndexOf('_');
            if (cut > 0 && Enum.GetNames<Architecture>().Contains(name[(cut + 1)..], StringComparer.Ordinal))
            {
                if (name[(cut + 1)..] != ArchitectureOf(abi.Arch))
                {
                    output.WriteLine($"not compared: {holder.Name}.{name} (this header is {abi.Arch}'s)");
                    continue;
                }
                key = name[..cut];
            }
            if (NotInHeader.TryGetValue(key, out string? reason))
            {
                output.WriteLine($"not compared: {holder.Name}.{name} ({reason})");
                if (abi.Values.ContainsKey(key))
                {
                    failures.Add($"{key} is listed in NotInHeader but the header has it: remove it from NotInHeader");
                }
            }
            else if (abi.Values.TryGetValue(key, out long headerValue))
            {
                long value = Convert.ToInt64(field.GetRawConstantValue(), CultureInfo.InvariantCulture);
                compared++;
                if (value != headerValue)
                {
                    failures.Add($"{holder.Name}.{name}: C# {value} (0x{value:X}), header's {key} {headerValue} (0x{headerValue:X})");
                }
            }
            else if (abi.Missing.Contains(key))
            {
                output.WriteLine($"skipped: {key} is not in this header");
            }
            else
            {
                failures.Add($"abi_dump.c does not print {key} for {holder.Name}.{name}: add it (with #ifdef or a probe if newer than the 6.1 header), or list it in NotInHeader with a reason");
            }
        }

        output.WriteLine($"{target}: compared {compared} constants");
        Assert.True(failures.Count == 0, string.Join('\n', failures));

        static IEnumerable<Type> WithNested(Type type) =>
            type.GetNestedTypes(BindingFlags.Public | BindingFlags.NonPublic).SelectMany(WithNested).Prepend(type);

        // abi_dump.c's arch line as the Architecture enum's name.
        static string? ArchitectureOf(string arch) => arch switch
        {
            "x86_64" => nameof(Architecture.X64),
            "aarch64" => nameof(Architecture.Arm64),
            _ => null,
        };
    }

    /// <summary>
    /// Every struct the binding passes to the kernel, public or internal: each is compared field by field with the
    /// header (abi_dump.c prints it). A new one goes here and in abi_dump.c; <see cref="Every_interop_struct_is_in_the_checked_list"/>
    /// fails until it does.
    /// </summary>
    private static readonly Type[] KernelStructs =
    [
        typeof(io_uring_sqe), typeof(io_uring_cqe), typeof(io_sqring_offsets), typeof(io_cqring_offsets),
        typeof(io_uring_params), typeof(io_uring_buf), typeof(io_uring_buf_reg), typeof(io_uring_rsrc_update),
        typeof(io_uring_rsrc_register), typeof(io_uring_rsrc_update2),
        typeof(io_uring_getevents_arg), typeof(__kernel_timespec), typeof(io_uring_probe), typeof(io_uring_probe_op),
        typeof(io_uring_recvmsg_out), typeof(iovec), typeof(Libc.msghdr), typeof(Libc.cmsghdr), typeof(Libc.linger),
        typeof(Libc.in_pktinfo), typeof(Libc.in6_pktinfo),
    ];

    [Fact]
    public void Every_interop_struct_is_in_the_checked_list()
    {
        // Structs of the Interop namespace, nested ones (Libc's) and internal ones included; fixed-buffer helpers excepted.
        string[] unlisted = typeof(io_uring_sqe).Assembly.GetTypes()
            .Where(t => t.Namespace == typeof(io_uring_sqe).Namespace && t.IsValueType && !t.IsEnum
                && !t.IsDefined(typeof(CompilerGeneratedAttribute), inherit: false) && !KernelStructs.Contains(t))
            .Select(t => t.FullName!)
            .ToArray();
        Assert.True(unlisted.Length == 0, $"not checked against the header: {string.Join(", ", unlisted)}");
    }

    private static IEnumerable<Type> InteropStructs() => KernelStructs;
}

/// <summary>Where abi_dump.c is compiled and run.</summary>
public enum AbiTarget
{
    /// <summary>This machine: gcc, run directly.</summary>
    Native,

    /// <summary>arm64: Debian's aarch64-linux-gnu-gcc (its cross kernel and glibc headers), static, run under qemu-aarch64-static.</summary>
    Arm64,
}

/// <summary>The parsed output of abi_dump.c: values by key, names this header lacks, and older-layout containers.</summary>
internal sealed class HeaderAbi
{
    public required string Header { get; init; }
    public required string Arch { get; init; }
    public required string Built { get; init; }
    public required IReadOnlyList<string> Defines { get; init; }
    public Dictionary<string, long> Values { get; } = new(StringComparer.Ordinal);
    public HashSet<string> Missing { get; } = new(StringComparer.Ordinal);
    public Dictionary<string, string> Within { get; } = new(StringComparer.Ordinal);
}

/// <summary>Compiles and runs abi_dump.c once per target for the test class, on first use.</summary>
public sealed class AbiDumpFixture : IDisposable
{
    private const string SourceRelativePath = "tests/IoUring.Tests/Abi/abi_dump.c";
    private static readonly TimeSpan ProcessTimeout = TimeSpan.FromSeconds(60);

    private readonly DirectoryInfo _work = Directory.CreateTempSubdirectory("iouring-abi-");
    private readonly Dictionary<AbiTarget, Lazy<HeaderAbi>> _abi;

    public AbiDumpFixture() =>
        _abi = Enum.GetValues<AbiTarget>().ToDictionary(target => target, target => new Lazy<HeaderAbi>(() => Build(target)));

    // Lazy caches a failure, so every test of a target whose tools are missing fails with the same message.
    internal HeaderAbi For(AbiTarget target) => _abi[target].Value;

    public void Dispose() => _work.Delete(recursive: true);

    /// <summary>
    /// How to build and run abi_dump.c for a target. Arch is what abi_dump must say it was compiled for (null: not
    /// checked), so a cross build that silently fell back to the host compiler can't pass as arm64.
    /// </summary>
    private sealed record Toolchain(string Compiler, string CompilerPackage, string HeadersPackage, string[] Flags,
        string? Emulator, string? EmulatorPackage, string? Arch);

    private static Toolchain ToolchainFor(AbiTarget target) => target switch
    {
        AbiTarget.Native => new("gcc", "build-essential", "linux-libc-dev", [], null, null, null),
        // Static, so qemu-user needs no arm64 glibc at run time (no sysroot, no binfmt registration).
        AbiTarget.Arm64 => new("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "linux-libc-dev-arm64-cross", ["-static"],
            "qemu-aarch64-static", "qemu-user-static", "aarch64"),
        _ => throw new ArgumentOutOfRangeException(nameof(target), target, null),
    };

    private HeaderAbi Build(AbiTarget target)
    {
        Toolchain tools = ToolchainFor(target);
        string? gcc = FindOnPath(tools.Compiler);
        string? emulator = tools.Emulator is null ? null : FindOnPath(tools.Emulator);
        var missing = new List<(string Program, string Package)>();
        if (gcc is null)
        {
            missing.Add((tools.Compiler, tools.CompilerPackage));
        }
        if (tools.Emulator is not null && emulator is null)
        {
            missing.Add((tools.Emulator, tools.EmulatorPackage!));
        }
        if (missing.Count > 0)
        {
            throw new InvalidOperationException(
                $"{string.Join(" and ", missing.Select(m => m.Program))} {(missing.Count == 1 ? "was" : "were")} not found on PATH, "
                + $"so the ABI contract can't be checked for {target} against <linux/io_uring.h>. "
                + $"Install {(missing.Count == 1 ? "it" : "them")}: sudo apt-get install {string.Join(' ', missing.Select(m => m.Package))}");
        }
        string source = FindSource();
        DirectoryInfo work = _work.CreateSubdirectory(target.ToString().ToLowerInvariant());
        string text = File.ReadAllText(source);

        // Enum members and struct fields can't be #ifdef'd: build each probe alone to learn which exist.
        var defines = new List<string>();
        var declared = new HashSet<string>(StringComparer.Ordinal);
        foreach (string line in text.Split('\n'))
        {
            string trimmed = line.Trim();
            if (!trimmed.StartsWith("* probe ", StringComparison.Ordinal))
            {
                continue;
            }
            string[] parts = trimmed["* probe ".Length..].Split(' ', 2, StringSplitOptions.TrimEntries);
            declared.Add(parts[0]);
            string probe = Path.Combine(work.FullName, $"{parts[0]}.c");
            File.WriteAllText(probe, $"#include <stddef.h>\n#include <linux/io_uring.h>\nlong long abi_probe = (long long)({parts[1]});\n");
            if (Run(gcc!, ["-fsyntax-only", probe]).ExitCode == 0)
            {
                defines.Add(parts[0]);
            }
        }
        foreach (string line in text.Split('\n'))
        {
            string trimmed = line.Trim();
            if (trimmed.StartsWith("#ifdef HAVE_", StringComparison.Ordinal) && !declared.Contains(trimmed["#ifdef ".Length..].Trim()))
            {
                throw new InvalidOperationException($"abi_dump.c uses '{trimmed}' without a matching '* probe' line, so it would never be printed");
            }
        }

        string binary = Path.Combine(work.FullName, "abi_dump");
        var compileArgs = new List<string> { "-std=gnu11", "-Wall", "-Wextra" };
        compileArgs.AddRange(tools.Flags);
        compileArgs.AddRange(["-o", binary, source]);
        compileArgs.AddRange(defines.Select(d => $"-D{d}"));
        (int compileExit, _, string compileErrors) = Run(gcc!, compileArgs);
        Assert.True(compileExit == 0, $"{tools.Compiler} could not compile {source} against its headers (is {tools.HeadersPackage} installed?):\n{compileErrors}");

        (int exit, string stdout, string stderr) = emulator is null ? Run(binary, []) : Run(emulator, [binary]);
        Assert.True(exit == 0, $"abi_dump ({target}) exited with {exit}:\n{stderr}");
        string built = string.Join(' ', [tools.Compiler, .. tools.Flags]) + (emulator is null ? ", run here" : $", run under {tools.Emulator}");
        HeaderAbi abi = Parse(stdout, defines, built);
        if (tools.Arch is not null && abi.Arch != tools.Arch)
        {
            throw new InvalidOperationException($"abi_dump built by {tools.Compiler} says it was compiled for '{abi.Arch}', not {tools.Arch}");
        }
        return abi;
    }

    private static HeaderAbi Parse(string stdout, List<string> defines, string built)
    {
        var lines = stdout.Split('\n', StringSplitOptions.RemoveEmptyEntries | StringSplitOptions.TrimEntries);
        string Line(string key) => lines.FirstOrDefault(l => l.StartsWith(key + " ", StringComparison.Ordinal))?[(key.Length + 1)..] ?? "unknown";
        var abi = new HeaderAbi { Header = Line("header"), Arch = Line("arch"), Built = built, Defines = defines };
        foreach (string line in lines)
        {
            string[] parts = line.Split(' ');
            switch (parts[0])
            {
                case "header":
                case "arch":
                    break;
                case "missing" when parts.Length == 2:
                    abi.Missing.Add(parts[1]);
                    break;
                case "within" when parts.Length == 3:
                    abi.Within.Add(parts[1], parts[2]);
                    break;
                default:
                    if (parts.Length != 2 || !long.TryParse(parts[1], NumberStyles.Integer, CultureInfo.InvariantCulture, out long value))
                    {
                        throw new InvalidOperationException($"abi_dump printed an unexpected line: '{line}'");
                    }
                    if (!abi.Values.TryAdd(parts[0], value))
                    {
                        throw new InvalidOperationException($"abi_dump printed '{parts[0]}' twice");
                    }
                    break;
            }
        }
        return abi;
    }

    private static string FindSource()
    {
        // Walk up from bin/<config>/<tfm>/ to the repo, so the .c file needs no copy step in the csproj.
        for (DirectoryInfo? dir = new(AppContext.BaseDirectory); dir is not null; dir = dir.Parent)
        {
            string candidate = Path.Combine(dir.FullName, SourceRelativePath);
            if (File.Exists(candidate))
            {
                return candidate;
            }
        }
        throw new FileNotFoundException($"{SourceRelativePath} was not found above {AppContext.BaseDirectory}");
    }

    private static string? FindOnPath(string program) =>
        (Environment.GetEnvironmentVariable("PATH") ?? "")
            .Split(':', StringSplitOptions.RemoveEmptyEntries)
            .Select(dir => Path.Combine(dir, program))
            .FirstOrDefault(File.Exists);

    private static (int ExitCode, string Stdout, string Stderr) Run(string program, IEnumerable<string> args)
    {
        var start = new ProcessStartInfo(program)
        {
            RedirectStandardOutput = true,
            RedirectStandardError = true,
            UseShellExecute = false,
        };
        foreach (string arg in args)
        {
            start.ArgumentList.Add(arg);
        }
        using Process process = Process.Start(start) ?? throw new InvalidOperationException($"could not start {program}");
        // Read stderr concurrently so neither pipe can fill up and block the child.
        Task<string> stderr = process.StandardError.ReadToEndAsync();
        string stdout = process.StandardOutput.ReadToEnd();
        if (!process.WaitForExit(ProcessTimeout))
        {
            process.Kill(entireProcessTree: true);
            throw new TimeoutException($"{program} did not finish within {ProcessTimeout}");
        }
        return (process.ExitCode, stdout, stderr.GetAwaiter().GetResult());
    }
}
