"""The benchmarks' one measurement toolkit: latency percentiles (``latency``), CPU used by
process groups over a block (``cpu``), and a child process's one JSON result line (``child``).
Every generator and benchmark section measures with these, so a figure means the same in each."""
