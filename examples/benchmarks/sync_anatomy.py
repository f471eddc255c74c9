"""Where a sync-mode step's time goes: forward, the wait until the first large gradient's allreduce
starts, the span of the large allreduces on the link, and what follows the last one; against W, one
allreduce of all gradients as one tensor (docs/performance.md, "Where the targets are out of reach").

    python examples/benchmarks/sync_anatomy.py --shape comm --dadtrun-args "-H h1:1,h2:1 \\
        --network-interface dadt0 -x DADT_REALTIME_THREADS=1"

A plain script: it starts itself under `dadtrun --gloo` with rank 0 writing a timeline, trains
peers.py's model of --shape in mode="sync" for --steps steps, and matches each step's
`model(x)` / `backward()` / `step()` times with the timeline's GLOO_ALLREDUCE spans of the
gradients of at least --large-elements elements (the small ones, biases and the output layer, go
out at once and do not hold the link). Prints the medians over the steps after --warmup (min .. max).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from allreduce_bench import find_dadtrun, worker_environment  # same folder
import peers  # same folder: the shapes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--shape", choices=list(peers.SHAPES), default="comm")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--large-elements", type=int, default=1 << 18,
                   help="a gradient of at least this many elements counts as large (default 262144)")
    p.add_argument("--fusion-threshold-mb", type=float, default=4.0)
    p.add_argument("--dadtrun", default=None)
    p.add_argument("--dadtrun-args", default="", help="extra dadtrun arguments, e.g. '-H a:1,b:1'")
    p.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args):
    import torch
    import torch.nn.functional as F
    import dadt.torch as dadt
    torch.set_num_threads(1)
    dadt.init()
    model, batch = peers.build(torch, args.shape)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    w = peers.whole_allreduce_s(torch, dadt, model, name="anatomy.W")
    opt = dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), mode="sync", model=model)
    g = torch.Generator().manual_seed(dadt.rank())
    x = torch.randn(batch, peers.INPUT_DIM, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    now = lambda: time.monotonic_ns() / 1e3  # the timeline's clock, in microseconds
    steps = []
    for _ in range(args.steps):
        a = now()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        b = now()
        loss.backward()
        opt.step()
        steps.append((a, b, now()))
    if dadt.rank() == 0:
        with open(os.path.join(args.worker, "steps.json"), "w") as f:
            json.dump({"steps": steps, "w": w}, f)
    dadt.shutdown()


def large_spans(trace, large):
    """(begin, end) of every GLOO_ALLREDUCE of a tensor of at least `large` elements, in us."""
    events = trace if isinstance(trace, list) else trace["traceEvents"]
    big = set()
    for e in events:
        shape = e.get("args", {}).get("shape") if e.get("name") == "ALLREDUCE" else None
        if shape is not None:
            n = 1
            for d in shape:
                n *= d
            if n >= large:
                big.add(e["pid"])
    spans, begun = [], {}
    for e in events:
        if e.get("name") == "GLOO_ALLREDUCE" and e.get("pid") in big:
            if e["ph"] == "B":
                begun[e["pid"]] = e["ts"]
            elif e["ph"] == "E" and e["pid"] in begun:
                spans.append((begun.pop(e["pid"]), e["ts"]))
    return spans


def driver(args):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("sync_anatomy: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "timeline.json")
        cmd = [dadtrun, "--gloo", "-np", str(args.np), "--fusion-threshold-mb", str(args.fusion_threshold_mb),
               "--timeline-filename", trace, *args.dadtrun_args.split(), sys.executable,
               os.path.abspath(__file__), "--worker", tmp, "--shape", args.shape, "--steps", str(args.steps)]
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, env=worker_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode != 0:
            sys.exit("sync_anatomy: the job failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))
        with open(os.path.join(tmp, "steps.json")) as f:
            run = json.load(f)
        with open(trace) as f:
            spans = large_spans(json.load(f), args.large_elements)
    rows = []
    for a, b, end in run["steps"][args.warmup:]:
        mine = [s for s in spans if a <= s[0] <= end]
        if not mine:
            continue
        first, last = min(s[0] for s in mine), max(s[1] for s in mine)
        rows.append(((b - a) / 1e3, (first - b) / 1e3, (last - first) / 1e3, (end - last) / 1e3, (end - a) / 1e3))
    if not rows:
        sys.exit("sync_anatomy: no allreduce of %d elements or more in the timeline (--large-elements)"
                 % args.large_elements)
    print("sync step on %s, %d ranks, medians of %d steps (min .. max); W alone %.1f ms\n"
          % (args.shape, args.np, len(rows), 1e3 * run["w"]))
    print("| phase | ms | min .. max |")
    print("| --- | ---: | ---: |")
    for i, name in enumerate(["forward", "backward start -> first large allreduce starts",
                              "first large allreduce starts -> last one done", "last done -> step() returns",
                              "step"]):
        v = [r[i] for r in rows]
        print("| %s | %.1f | %.1f .. %.1f |" % (name, statistics.median(v), min(v), max(v)))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    parsed = parse_args()
    worker(parsed) if parsed.worker else driver(parsed)
