namespace IoUring.Net;

/// <summary>
/// <see cref="OutputSegment"/> objects shared by a network's outputs, so writes allocate none once warm. A stack under
/// its own lock, taken inside an output's; past <see cref="Capacity"/> returned segments are left to the GC.
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
