"""python -m dadt.timeline summary FILE [--plot out.png] [--top N]"""

import argparse
import sys

from dadt.timeline.summary import format_table, summarize
from dadt.timeline.trace import load_trace


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dadt.timeline",
                                     description="Summarize a dadt timeline (Chrome trace JSON).")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="time per tensor and per phase, as a table")
    s.add_argument("file", help="the timeline file (dadtrun --timeline-filename)")
    s.add_argument("--plot", metavar="OUT.png",
                   help="also draw the trace as a PNG (needs matplotlib)")
    s.add_argument("--top", type=int, default=0, metavar="N",
                   help="show only the N busiest tensors")
    s.add_argument("--max-lanes", type=int, default=40, metavar="N", help="tensors drawn by --plot")
    args = parser.parse_args(argv)

    try:
        trace = load_trace(args.file)
    except OSError as e:
        print("error: cannot read %s: %s" % (args.file, e.strerror or e), file=sys.stderr)
        return 2
    summary = summarize(trace)
    sys.stdout.write(format_table(summary, top=args.top))
    if args.plot:
        try:
            from dadt.timeline.plot import plot
        except ImportError as e:  # pragma: no cover - plot imports matplotlib lazily
            print("error: --plot needs matplotlib (%s)" % e, file=sys.stderr)
            return 2
        try:
            lanes = plot(summary, args.plot, max_tensors=args.max_lanes)
        except ImportError as e:
            print("error: --plot needs matplotlib (python3 -m pip install matplotlib): %s" % e,
                  file=sys.stderr)
            return 2
        print("plot: %s (%d lanes)" % (args.plot, lanes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
