"""Draws a trace as one horizontal lane per tensor, one color per phase (matplotlib, Agg backend).

Nested phases are drawn as thinner bars on top of their parent, so GLOO_ALLREDUCE shows inside
ALLREDUCE. Global marks (CYCLE_START) are thin vertical lines. The time axis is in milliseconds
from the first event.
"""

from typing import Dict, List

from dadt.timeline.summary import Summary


def plot(summary: Summary, out_path: str, max_tensors: int = 40, title: str = "") -> int:
    """Writes a PNG to `out_path`; returns the number of lanes drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    trace = summary.trace
    tensors = sorted(summary.tensor_totals, key=lambda t: -summary.tensor_totals[t])[:max_tensors]
    # Lanes top to bottom in order of first appearance, as in chrome://tracing.
    first = {t: k for k, t in enumerate(trace.tensors)}
    tensors.sort(key=lambda t: first.get(t, len(first)))
    lane = {t: k for k, t in enumerate(tensors)}
    phases: List[str] = [r.phase for r in summary.by_phase]
    cmap = plt.get_cmap("tab20")
    color: Dict[str, object] = {p: cmap(k % 20) for k, p in enumerate(phases)}

    height = max(2.5, 0.32 * len(tensors) + 1.8)
    fig, ax = plt.subplots(figsize=(14, height))
    t0 = trace.start_us
    for s in trace.spans:
        if s.tensor not in lane:
            continue
        h = max(0.8 - 0.22 * s.depth, 0.2)
        ax.barh(lane[s.tensor], (s.end_us - s.start_us) / 1000.0, left=(s.start_us - t0) / 1000.0,
                height=h, color=color[s.phase], edgecolor="none", zorder=2 + s.depth)
    marks = [ts for tensor, name, ts in trace.instants if tensor == "" and name == "CYCLE_START"]
    for ts in marks[:2000]:
        ax.axvline((ts - t0) / 1000.0, color="0.6", linewidth=0.5, linestyle=":", zorder=1)
    ax.set_yticks(range(len(tensors)))
    ax.set_yticklabels([t if len(t) <= 40 else t[:37] + "..." for t in tensors], fontsize=8)
    ax.set_ylim(len(tensors) - 0.5, -0.5)
    ax.set_xlabel("time (ms)")
    ax.grid(axis="x", linestyle=":", linewidth=0.5, zorder=0)
    hidden = len(summary.tensor_totals) - len(tensors)
    ax.set_title(title or "dadt timeline: %d tensors%s" % (
        len(tensors), " (%d smaller ones not drawn)" % hidden if hidden > 0 else ""))
    ax.legend(handles=[Patch(color=color[p], label=p) for p in phases], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return len(tensors)
