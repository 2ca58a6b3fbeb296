using System.Reflection;
using System.Runtime.CompilerServices;
using IoUring.Buffers;
using Xunit.Sdk;

[assembly: IoUring.Testing.PoolCheckAttribute]

namespace IoUring.Testing;

/// <summary>
/// Runs the test assembly on the library's diagnostic pools (<see cref="PoolDiagnostics"/>): the module initializer
/// turns the switch on before any pool exists, and after each test the problems the pools reported (blocks never
/// returned once their loop stopped, returned twice, written after return) fail that test, each with its stacks.
/// </summary>
/// <remarks>Tests run in parallel, so a problem fails the first test that ends after it was reported; the report
/// names the loop's origin (the test that made it) and the rent's stack.</remarks>
[AttributeUsage(AttributeTargets.Assembly | AttributeTargets.Class | AttributeTargets.Method)]
public sealed class PoolCheckAttribute : BeforeAfterTestAttribute
{
    /// <summary>How long blocks may take to come back after their pool stopped (a connection's reader may complete
    /// after its loop stopped) before they count as leaks.</summary>
    private static readonly TimeSpan s_grace = TimeSpan.FromSeconds(5);

#pragma warning disable CA2255 // a test assembly: the switch must be set before any test touches a pool
    [ModuleInitializer]
    internal static void TurnOnDiagnosticPools() => AppContext.SetSwitch(PoolDiagnostics.SwitchName, true);
#pragma warning restore CA2255

    public override void After(MethodInfo methodUnderTest)
    {
        List<string> problems = PoolDiagnostics.TakeProblems(s_grace);
        if (problems.Count > 0)
        {
            throw new XunitException(
                $"The diagnostic pools reported {problems.Count} problem(s) by the end of "
                + $"{methodUnderTest.DeclaringType?.Name}.{methodUnderTest.Name}:{Environment.NewLine}"
                + string.Join(Environment.NewLine + "---" + Environment.NewLine, problems));
        }
    }
}
