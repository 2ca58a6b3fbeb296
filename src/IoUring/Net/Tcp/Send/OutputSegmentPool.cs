namespace IoUring.Net;

/// <summary>
/// <see cref="OutputSegment"/> objects shared by a network's outputs, so a connection's writes allocate none once warm
/// (they never reach the application: only the sender reads them). A stack under its own lock, taken inside an
/// output's; it grows to the most segments held at once (64 connections each with 1 MiB unsent hold 4,096), up to
/// <see cref="Capacity"/> (~1 MB of segment objects); past that they are left to the GC.
/// </summary>
internal sealed class OutputSegmentPool
{
    private const int Capacity = 16 * 1024;
    private readonly Lock _lock = new();
    private readonly Stack<OutputSegment> _free = new();

    public OutputSegment Rent()
    {
        lock (_lock)
        {
            if (_free.TryPop(out OutputSegment? segment))
            {
                return segment;
            }
        }
        return new OutputSegment();
    }

    public void Return(OutputSegment segment)
    {
        lock (_lock)
        {
            if (_free.Count < Capacity)
            {
                _free.Push(segment);
            }
        }
    }
}
