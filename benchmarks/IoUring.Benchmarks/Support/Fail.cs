using System.Diagnostics.CodeAnalysis;
using IoUring.Rings;

namespace IoUring.Benchmarks.Support;

/// <summary>Throw helpers for the benchmarks' result checks, so the measured loops stay small.</summary>
internal static class Fail
{
    [DoesNotReturn]
    public static void SubmissionQueueFull() => throw new InvalidOperationException("The submission queue is full.");

    [DoesNotReturn]
    public static void Enter(int result, uint expected) => throw (result < 0
        ? IoUringException.FromErrno("io_uring_enter", -result)
        : new InvalidOperationException($"io_uring_enter submitted {result} SQEs, expected {expected}."));

    [DoesNotReturn]
    public static void Completions(uint ready, uint expected) =>
        throw new InvalidOperationException($"{ready} completions were ready, expected {expected}.");

    [DoesNotReturn]
    public static void Result(int result) => throw (result < 0
        ? IoUringException.FromErrno("completion", -result)
        : new InvalidOperationException($"Unexpected completion result {result}."));

    [DoesNotReturn]
    public static void Call(string what, int errno) => throw IoUringException.FromErrno(what, errno);

    [DoesNotReturn]
    public static void Check(string message) => throw new InvalidOperationException(message);
}
