"""Reading dadt timelines: the Chrome trace files written by dadt's timeline writer.

    python -m dadt.timeline summary timeline.json [--plot step.png]

prints, per tensor and per phase (QUEUE, NEGOTIATE_ALLREDUCE, MEMCPY_IN_FUSION_BUFFER,
GLOO_ALLREDUCE, ...), the time spent and its share of the tensor's time and of all time, and can
draw the trace as one lane per tensor. From Python::

    from dadt.timeline import load_trace, summarize
    trace = load_trace("timeline.json")
    for row in summarize(trace).rows: print(row.tensor, row.phase, row.self_us)

Plain Python; matplotlib is needed only for the plot. Importing this package loads no framework and
not the runtime.
"""

from dadt.timeline.summary import PhaseRow, Summary, format_table, summarize
from dadt.timeline.trace import Span, Trace, load_trace, parse_trace

__all__ = [
    "PhaseRow",
    "Span",
    "Summary",
    "Trace",
    "format_table",
    "load_trace",
    "parse_trace",
    "summarize",
]
