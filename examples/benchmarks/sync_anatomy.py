"""Where a sync-mode step's time goes: forward, the wait until the first large gradient's allreduce
starts, the span of the large allreduces on the link, and what follows the last one; against W, one
allreduce of all gradients as one tensor (docs/benchmarks/log.md, "Where the targets are out of reach").

    python examples/benchmarks/sync_anatomy.py --shape comm --dadtrun-args "-H h1:1,h2:1 \\
        --network-interface dadt0 -x DADT_REALTIME_THREADS=1"

A plain script: it starts itself under `dadtrun --gloo` with rank 0 writing a timeline, trains
peers.py's model of --shape (or bench_models.py's many-tensor MLP: 162 tensors of 256 x 256 and
less) in mode="sync" for --steps steps, and matches each step's
`model(x)` / `backward()` / `step()` times with the timeline's GLOO_ALLREDUCE spans (read by
dadt.timeline) of the gradients of at least --large-elements elements (the small ones, biases and the output layer, go
out at once and do not hold the link). Prints the medians over the steps after --warmup (min .. max),
and how many allreduce responses (fused or not: distinct GLOO_ALLREDUCE spans) a step's large
gradients went out in, and how long one took.
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
import bench_models  # same folder: the many-tensor MLP
import peers  # same folder: the shapes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--shape", choices=list(peers.SHAPES) + ["many-tensor"], default="comm")
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--large-elements", type=int, default=1 << 18,
                   help="a gradient of at least this many elements counts as large (default 262144)")
    p.add_argument("--fusion-threshold-mb", type=float, default=4.0)
    p.add_argument("--dadtrun", default=None)
    p.add_argument("--dadtrun-args", default="", help="extra dadtrun arguments, e.g. '-H a:1,b:1'")
    p.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    p.add_argument("--timeline", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args):
    import torch
    import torch.nn.functional as F
    import dadt.torch as dadt
    torch.set_num_threads(1)
    dadt.init()
    if args.shape == "many-tensor":
        model = bench_models.build(torch, "many-tensor")[0]
        batch = bench_models.DEFAULT_BATCH["many-tensor"]
    else:
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
    large = {"allreduce.grad." + n for n, p in model.named_parameters() if p.numel() >= args.large_elements}
    rank = dadt.rank()
    dadt.shutdown()  # rank 0's timeline is complete from here on
    if rank == 0:
        with open(os.path.join(args.worker, "phases.json"), "w") as f:
            json.dump({"rows": phases(steps, args.timeline, large, args.warmup), "w": w}, f)


def phases(steps, timeline, large, warmup):
    """Per step after `warmup`: (forward, backward start -> first large allreduce, first large
    allreduce -> last one done, last done -> step end, step, responses, median response), in ms but
    the count of responses (distinct spans: a fused response's tensors share theirs). `large`: the
    timeline rows (allreduce.grad.<parameter name>, Horovod's row names) of the large gradients."""
    from dadt.timeline.trace import load_trace
    spans = [(s.start_us, s.end_us) for s in load_trace(timeline).spans
             if s.phase == "GLOO_ALLREDUCE" and s.tensor in large]
    rows = []
    for a, b, end in steps[warmup:]:
        mine = [sp for sp in spans if a <= sp[0] <= end]
        if mine:
            first, last = min(sp[0] for sp in mine), max(sp[1] for sp in mine)
            responses = sorted(set(mine))
            rows.append(((b - a) / 1e3, (first - b) / 1e3, (last - first) / 1e3, (end - last) / 1e3,
                         (end - a) / 1e3, len(responses),
                         statistics.median(e - s for s, e in responses) / 1e3))
    return rows


def driver(args):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("sync_anatomy: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "timeline.json")
        cmd = [dadtrun, "--gloo", "-np", str(args.np), "--fusion-threshold-mb", str(args.fusion_threshold_mb),
               "--timeline-filename", trace, *args.dadtrun_args.split(), sys.executable,
               os.path.abspath(__file__), "--worker", tmp, "--timeline", trace, "--shape", args.shape,
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--large-elements", str(args.large_elements)]
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, env=worker_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        if proc.returncode != 0:
            sys.exit("sync_anatomy: the job failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))
        with open(os.path.join(tmp, "phases.json")) as f:
            run = json.load(f)
    rows = run["rows"]
    if not rows:
        sys.exit("sync_anatomy: no allreduce of %d elements or more in the timeline (--large-elements)"
                 % args.large_elements)
    print("sync step on %s, %d ranks, medians of %d steps (min .. max); W alone %.1f ms\n"
          % (args.shape, args.np, len(rows), 1e3 * run["w"]))
    print("| phase | ms | min .. max |")
    print("| --- | ---: | ---: |")
    for i, name in enumerate(["forward", "backward start -> first large allreduce starts",
                              "first large allreduce starts -> last one done", "last done -> step() returns",
                              "step", "allreduce responses per step (count)", "one response's span"]):
        v = [r[i] for r in rows]
        print("| %s | %.1f | %.1f .. %.1f |" % (name, statistics.median(v), min(v), max(v)))


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.worker:
        worker(parsed)
    else:
        driver(parsed)
