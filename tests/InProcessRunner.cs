using System.Collections.Concurrent;
using System.Diagnostics;
using Xunit.Abstractions;
using Xunit.Sdk;

namespace IoUring.Testing;

/// <summary>
/// The entry point of each test project: runs that assembly's tests in its own process, without the SDK or vstest, for
/// a self-contained publish on a machine with no .NET SDK, such as the arm64 guest of <c>tests/kernels/run.sh</c>.
/// <c>dotnet test</c> never calls it.
/// </summary>
/// <remarks>
/// <c>PROJECT [--include TEXT]... [--exclude TEXT]... [--trace]</c>: a test runs when its full name (namespace,
/// class, method) contains some <c>--include</c> (or none was given) and no <c>--exclude</c>; <c>--trace</c> also prints
/// each test as it starts, to name the one a crash killed. The summary lines match
/// vstest's console logger, so run.sh reads both alike. Exit status: 0 all passed, 1 a test failed, 2 bad arguments.
/// <c>PROJECT --call NAMESPACE.TYPE.METHOD</c> runs that static method alone, for tests that need a fresh process of
/// their own (its int result is the exit status).
/// </remarks>
public static class InProcessRunner
{
    public static int Main(string[] args)
    {
        if (args is ["--call", string method])
        {
            return Call(method);
        }
        var include = new List<string>();
        var exclude = new List<string>();
        bool trace = false;
        for (int i = 0; i < args.Length; i++)
        {
            if (i + 1 < args.Length && args[i] == "--include") include.Add(args[++i]);
            else if (i + 1 < args.Length && args[i] == "--exclude") exclude.Add(args[++i]);
            else if (args[i] == "--trace") trace = true;
            else
            {
                Console.Error.WriteLine($"unknown argument '{args[i]}'; usage: {AppDomain.CurrentDomain.FriendlyName} [--include TEXT]... [--exclude TEXT]... [--trace]");
                return 2;
            }
        }

        var assembly = typeof(InProcessRunner).Assembly;
        var framework = new XunitTestFramework(new ConsoleDiagnostics());
        var discovery = new DiscoverySink();
        using (var discoverer = framework.GetDiscoverer(Reflector.Wrap(assembly)))
        {
            discoverer.Find(includeSourceInformation: false, discovery, new Options());
            discovery.Finished.WaitOne();
        }

        var selected = discovery.TestCases.Where(test =>
        {
            string name = $"{test.TestMethod.TestClass.Class.Name}.{test.TestMethod.Method.Name}";
            return (include.Count == 0 || include.Exists(name.Contains)) && !exclude.Exists(name.Contains);
        }).ToList();
        Console.WriteLine($"Running {selected.Count} of {discovery.TestCases.Count} test cases on {System.Runtime.InteropServices.RuntimeInformation.OSArchitecture}, page size {Environment.SystemPageSize}");

        var execution = new ExecutionSink(trace);
        var clock = Stopwatch.StartNew();
        using (var executor = framework.GetExecutor(assembly.GetName()))
        {
            executor.RunTests(selected, execution, new Options());
            execution.Finished.WaitOne();
        }

        Console.WriteLine(execution.Failed == 0 ? "Test Run Successful." : "Test Run Failed.");
        Console.WriteLine($"Total tests: {execution.Passed + execution.Failed + execution.Skipped}");
        Console.WriteLine($"     Passed: {execution.Passed}");
        if (execution.Failed > 0) Console.WriteLine($"     Failed: {execution.Failed}");
        if (execution.Skipped > 0) Console.WriteLine($"    Skipped: {execution.Skipped}");
        Console.WriteLine($" Total time: {clock.Elapsed.TotalMinutes:F1} Minutes");
        return execution.Failed == 0 ? 0 : 1;
    }

    private static int Call(string name)
    {
        int dot = name.LastIndexOf('.');
        Type type = typeof(InProcessRunner).Assembly.GetType(name[..dot], throwOnError: true)!;
        System.Reflection.MethodInfo method = type.GetMethod(name[(dot + 1)..],
            System.Reflection.BindingFlags.Public | System.Reflection.BindingFlags.NonPublic
            | System.Reflection.BindingFlags.Static)
            ?? throw new ArgumentException($"{type} has no static method {name[(dot + 1)..]}");
        return method.Invoke(null, null) is int status ? status : 0;
    }

    /// <summary>Discovery and execution options: xunit's defaults (and the assembly's attributes) for every name.</summary>
    private sealed class Options : ITestFrameworkDiscoveryOptions, ITestFrameworkExecutionOptions
    {
        private readonly ConcurrentDictionary<string, object?> _values = new();
        public TValue GetValue<TValue>(string name) => _values.TryGetValue(name, out var value) ? (TValue)value! : default!;
        public void SetValue<TValue>(string name, TValue value) => _values[name] = value;
    }

    private sealed class ConsoleDiagnostics : LongLivedMarshalByRefObject, IMessageSink
    {
        public bool OnMessage(IMessageSinkMessage message)
        {
            if (message is IDiagnosticMessage diagnostic) Console.WriteLine($"[xunit] {diagnostic.Message}");
            return true;
        }
    }

    private sealed class DiscoverySink : LongLivedMarshalByRefObject, IMessageSink
    {
        public List<ITestCase> TestCases { get; } = new();
        public ManualResetEvent Finished { get; } = new(false);

        public bool OnMessage(IMessageSinkMessage message)
        {
            if (message is ITestCaseDiscoveryMessage found) TestCases.Add(found.TestCase);
            else if (message is IDiscoveryCompleteMessage) Finished.Set();
            return true;
        }
    }

    /// <summary>Prints each result as vstest's console logger does (normal verbosity) and counts them.</summary>
    private sealed class ExecutionSink(bool trace) : LongLivedMarshalByRefObject, IMessageSink
    {
        public int Passed, Failed, Skipped;
        public ManualResetEvent Finished { get; } = new(false);

        public bool OnMessage(IMessageSinkMessage message)
        {
            switch (message)
            {
                case ITestStarting starting when trace:
                    Console.WriteLine($"  Starting {starting.Test.DisplayName}");
                    break;
                case ITestPassed passed:
                    Interlocked.Increment(ref Passed);
                    Console.WriteLine($"  Passed {passed.Test.DisplayName} [{Milliseconds(passed)}]");
                    break;
                case ITestFailed failed:
                    Interlocked.Increment(ref Failed);
                    Console.WriteLine($"  Failed {failed.Test.DisplayName} [{Milliseconds(failed)}]");
                    Console.WriteLine($"  Error Message:\n   {string.Join("\n   ", failed.Messages)}");
                    Console.WriteLine($"  Stack Trace:\n{string.Join("\n", failed.StackTraces)}");
                    break;
                case ITestSkipped skipped:
                    Interlocked.Increment(ref Skipped);
                    Console.WriteLine($"  Skipped {skipped.Test.DisplayName}: {skipped.Reason}");
                    break;
                case ITestAssemblyFinished:
                    Finished.Set();
                    break;
            }
            return true;
        }

        private static string Milliseconds(ITestResultMessage result) => $"{result.ExecutionTime * 1000:F0} ms";
    }
}
