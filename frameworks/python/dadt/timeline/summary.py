"""Per tensor and per phase totals of a trace, and their aligned-table rendering.

Time is attributed exclusively ("self time"): a phase nested in another (GLOO_ALLREDUCE inside
ALLREDUCE) is subtracted from its parent, so the phases of a tensor add up to the tensor's busy
time and the shares add up to 100%. The inclusive duration is reported beside it.
"""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Tuple

from dadt.timeline.trace import Trace


@dataclass
class PhaseRow:
    tensor: str  # "" in the per-phase rows of all tensors together
    phase: str
    count: int
    self_us: float  # exclusive time ("total" in the table)
    incl_us: float  # inclusive time (nested phases included)
    tensor_share: float  # self_us / the tensor's self time, in %
    all_share: float  # self_us / all tensors' self time, in %


@dataclass
class Summary:
    rows: List[PhaseRow]  # grouped by tensor (largest first), phases largest first
    by_phase: List[PhaseRow]  # every tensor together, largest first
    tensor_totals: Dict[str, float]  # tensor -> self time (us)
    total_us: float
    trace: Trace


def summarize(trace: Trace) -> Summary:
    acc: Dict[Tuple[str, str], List[float]] = OrderedDict()  # -> [count, self, incl]
    for s in trace.spans:
        a = acc.setdefault((s.tensor, s.phase), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += s.self_us
        a[2] += s.duration_us
    tensor_totals: Dict[str, float] = {}
    phase_acc: Dict[str, List[float]] = {}
    for (tensor, phase), (count, self_us, incl_us) in acc.items():
        tensor_totals[tensor] = tensor_totals.get(tensor, 0.0) + self_us
        p = phase_acc.setdefault(phase, [0, 0.0, 0.0])
        p[0] += count
        p[1] += self_us
        p[2] += incl_us
    total = sum(tensor_totals.values())

    def pct(part: float, whole: float) -> float:
        return 100.0 * part / whole if whole > 0 else 0.0

    rows = [
        PhaseRow(t, p, int(c), s, i, pct(s, tensor_totals[t]), pct(s, total))
        for (t, p), (c, s, i) in acc.items()
    ]
    busiest = sorted(tensor_totals, key=lambda t: (-tensor_totals[t], t))
    order = {t: k for k, t in enumerate(busiest)}
    rows.sort(key=lambda r: (order[r.tensor], -r.self_us, r.phase))
    by_phase = [PhaseRow("", p, int(c), s, i, 100.0 if total > 0 else 0.0, pct(s, total))
                for p, (c, s, i) in phase_acc.items()]
    for r in by_phase:
        r.tensor_share = r.all_share
    by_phase.sort(key=lambda r: (-r.self_us, r.phase))
    return Summary(rows, by_phase, tensor_totals, total, trace)


def _table(header: List[str], body: List[List[str]], right: List[bool]) -> List[str]:
    widths = [max([len(h)] + [len(row[k]) for row in body]) for k, h in enumerate(header)]

    def line(cells: List[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right))
        return "  ".join(padded).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(row) for row in body]


def _shorten(name: str, width: int = 60) -> str:
    name = name.replace("\n", "\\n").replace("\t", "\\t")
    return name if len(name) <= width else name[: width - 3] + "..."


def format_table(summary: Summary, top: int = 0) -> str:
    """The summary as aligned text tables; `top` > 0 keeps only the largest `top` tensors."""
    trace = summary.trace
    out = [
        "%d tensors, %d spans over %.3f ms; time is exclusive (nested phases are subtracted from "
        "their parent), so each tensor's phases add up to 100%%"
        % (len(summary.tensor_totals), len(trace.spans), (trace.end_us - trace.start_us) / 1000.0)
    ]
    if trace.truncated or trace.open_spans:
        out.append("note: the trace was cut short (%d spans still open were closed at its last "
                   "timestamp)" % trace.open_spans)
    if not summary.rows:
        out.append("no spans (B/E or X events) in this trace")
        return "\n".join(out) + "\n"
    keep = sorted(summary.tensor_totals, key=lambda t: -summary.tensor_totals[t])
    keep = set(keep[:top]) if top > 0 else set(keep)
    right = [False, False, True, True, True, True, True]
    header = ["TENSOR", "PHASE", "COUNT", "TOTAL_MS", "INCL_MS", "%TENSOR", "%ALL"]

    def ms(us: float) -> str:
        return "%.3f" % (us / 1000.0)

    def cells(r: PhaseRow, tensor: str) -> List[str]:
        return [tensor, r.phase, str(r.count), ms(r.self_us), ms(r.incl_us),
                "%.1f" % r.tensor_share, "%.1f" % r.all_share]

    body, last = [], None
    for r in summary.rows:
        if r.tensor not in keep:
            continue
        body.append(cells(r, _shorten(r.tensor) if r.tensor != last else ""))
        last = r.tensor
    out.append("")
    out += _table(header, body, right)
    if top > 0 and len(summary.tensor_totals) > top:
        out.append("(%d more tensors not shown)" % (len(summary.tensor_totals) - top))
    out.append("")
    out.append("all tensors, per phase (total %.3f ms)" % (summary.total_us / 1000.0))
    out += _table(["PHASE", "COUNT", "TOTAL_MS", "INCL_MS", "%ALL"],
                  [[r.phase, str(r.count), ms(r.self_us), ms(r.incl_us), "%.1f" % r.all_share]
                   for r in summary.by_phase],
                  [False, True, True, True, True])
    return "\n".join(out) + "\n"
