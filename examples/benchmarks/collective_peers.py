"""One allreduce, many sizes, four implementations: dadt against torch.distributed (gloo), Horovod
and raw Gloo, in one run, alternated.

    python examples/benchmarks/collective_peers.py --np 2
    python examples/benchmarks/collective_peers.py --np 2 --horovodrun /opt/horovod-peer/bin/horovodrun

Every contender runs in its own launch; one round launches each contender once, in an order rotated
from round to round, so that a slow spell of the machine hits every contender alike. A launch times
an in-place float32 Sum allreduce of each size (--sizes, 4 KiB to 256 MiB by default) back to back,
after a warm-up, and reports the median time per size. The table gives, per size and contender,
the median over rounds with the spread (min .. max), and the median over rounds of dadt's time
divided by each peer's time in the same round (below 1: dadt is faster).

Contenders:
  dadt     dadt.torch.allreduce_ under `dadtrun --gloo` (the same tensor name every iteration, as
           training reuses its gradients' names);
  torch    torch.distributed.all_reduce on a gloo process group (`python -m torch.distributed.run`);
  horovod  horovod.torch.allreduce_ under `horovodrun --gloo` (when --horovodrun is given; its
           python runs the Horovod rows);
  gloo     examples/benchmarks/raw_gloo_allreduce (plain gloo::allreduce of the Gloo dadt is built
           with), one process per rank, when the binary is found (bazel build
           //examples/benchmarks:raw_gloo_allreduce).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from allreduce_bench import find_dadtrun, find_raw_gloo, worker_environment  # same folder

KiB = 1024
DEFAULT_SIZES = ",".join(str(4 ** k * 4 * KiB) for k in range(9))  # 4 KiB .. 256 MiB
CONTENDERS = ("dadt", "torch", "horovod", "gloo")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes, comma-separated (default 4 KiB .. 256 MiB)")
    p.add_argument("--rounds", type=int, default=3, help="launches per contender (default 3)")
    p.add_argument("--budget-mb", type=float, default=2048.0,
                   help="bytes reduced per size and launch, in MB: iterations = budget / size, 5 to 200")
    p.add_argument("--contenders", default=",".join(CONTENDERS), help="subset of dadt,torch,horovod,gloo")
    p.add_argument("--dadtrun", default=None, help="dadt's launcher (default: $DADTRUN, PATH, bazel-bin)")
    p.add_argument("--horovodrun", default=None, help="Horovod's launcher; its python runs the Horovod rows")
    p.add_argument("--raw-gloo", default=None, help="raw_gloo_allreduce binary ('none' skips it)")
    p.add_argument("--json", metavar="FILE", help="also write every launch's figures as JSON")
    p.add_argument("--worker", choices=["dadt", "torch", "horovod"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def iterations(size, budget_mb):
    return max(5, min(200, int(budget_mb * 1e6 / size)))


def worker(args):
    import time
    import torch
    torch.set_num_threads(1)
    if args.worker == "dadt":
        import dadt.torch as dadt
        dadt.init()
        rank = dadt.rank()
        def reduce(x, name):
            dadt.allreduce_(x, op=dadt.Sum, name=name)
        finish = dadt.shutdown
    elif args.worker == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank = hvd.rank()
        def reduce(x, name):
            hvd.allreduce_(x, op=hvd.Sum, name=name)
        finish = hvd.shutdown
    else:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        def reduce(x, name):
            dist.all_reduce(x)
        finish = dist.destroy_process_group
    for size in (int(s) for s in args.sizes.split(",")):
        x = torch.zeros(size // 4)
        name = f"t{size}"
        for _ in range(3):
            reduce(x, name)
        times = []
        for _ in range(iterations(size, args.budget_mb)):
            t0 = time.perf_counter()
            reduce(x, name)
            times.append(time.perf_counter() - t0)
        if rank == 0:
            print("RESULT " + json.dumps({"size": size, "median_us": statistics.median(times) * 1e6}),
                  flush=True)
    finish()


def parse_results(text):
    out = {}
    for line in text.splitlines():
        at = line.find("RESULT ")
        if at >= 0:
            row = json.loads(line[at + len("RESULT "):])
            out[row["size"]] = row["median_us"]
    return out


def run_raw_gloo(binary, args):
    """One launch of args.np processes per size, so that each size gets its own iteration count."""
    rows = {}
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="collective_peers_") as store:
            cmd = [binary, "--store-dir", store, "--sizes", str(size), "--iters",
                   str(iterations(size, args.budget_mb)), "--warmup", "3"]
            procs = [subprocess.Popen(cmd, env=dict(os.environ, DADT_RANK=str(rank), DADT_SIZE=str(args.np)),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                     for rank in range(args.np)]
            outs = [p.communicate(timeout=1800)[0] for p in procs]
        if any(p.returncode != 0 for p in procs):
            raise RuntimeError("raw_gloo_allreduce failed:\n" + outs[0][-2000:])
        for line in outs[0].splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                rows[row["size_bytes"]] = row["median_us"]
    return rows


def launch(kind, args, env):
    me = os.path.abspath(__file__)
    tail = ["--worker", kind, "--sizes", args.sizes, "--budget-mb", str(args.budget_mb)]
    if kind == "dadt":
        cmd = [args.dadtrun_path, "--gloo", "-np", str(args.np), sys.executable, me] + tail
    elif kind == "torch":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.np}",
               me] + tail
    elif kind == "horovod":
        hvd_python = os.path.join(os.path.dirname(args.horovodrun), "python3")
        cmd = [args.horovodrun, "--gloo", "-np", str(args.np), "-H", f"localhost:{args.np}", hvd_python,
               me] + tail
    else:
        return run_raw_gloo(args.raw_gloo_path, args)
    run_env = dict(env, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=1800)
    rows = parse_results(proc.stdout)
    if proc.returncode != 0 or not rows:
        raise RuntimeError(f"{kind} launch failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    return rows


def human(size):
    return f"{size // (1024 * 1024)} MiB" if size >= 1024 * 1024 else f"{size // 1024} KiB"


def spread(values):
    return f"{statistics.median(values):.0f} ({min(values):.0f} .. {max(values):.0f})"


def table(args, kinds, runs):
    sizes = [int(s) for s in args.sizes.split(",")]
    peers = [k for k in kinds if k != "dadt"]
    head = ["size"] + [f"{k} us (spread)" for k in kinds] + [f"dadt / {p} (spread)" for p in peers]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for size in sizes:
        cells = [human(size)]
        for k in kinds:
            cells.append(spread([r[k][size] for r in runs]))
        for p in peers:
            ratios = [r["dadt"][size] / r[p][size] for r in runs]
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f} .. {max(ratios):.2f})")
        print("| " + " | ".join(cells) + " |")


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    kinds = [k.strip() for k in args.contenders.split(",") if k.strip()]
    for k in kinds:
        if k not in CONTENDERS:
            sys.exit(f"collective_peers: unknown contender {k!r} (expected a subset of {','.join(CONTENDERS)})")
    if "dadt" not in kinds:
        sys.exit("collective_peers: the contenders must include dadt (ratios are dadt's)")
    notes = []
    args.dadtrun_path = find_dadtrun(args.dadtrun)
    if args.dadtrun_path is None:
        sys.exit("collective_peers: dadtrun not found (use --dadtrun, or install dadt)")
    if "horovod" in kinds and not args.horovodrun:
        kinds.remove("horovod")
        notes.append("horovod skipped: no --horovodrun given (../shared/peers/build_horovod.sh builds one)")
    args.raw_gloo_path = find_raw_gloo(args.raw_gloo) if "gloo" in kinds else None
    if "gloo" in kinds and args.raw_gloo_path is None:
        kinds.remove("gloo")
        notes.append("raw Gloo skipped: raw_gloo_allreduce not found "
                     "(bazel build //examples/benchmarks:raw_gloo_allreduce, or pass --raw-gloo)")
    env = worker_environment()
    runs = []
    for r in range(args.rounds):
        order = kinds[r % len(kinds):] + kinds[:r % len(kinds)]
        runs.append({k: launch(k, args, env) for k in order})
        print(f"round {r + 1}/{args.rounds} done (order: {', '.join(order)})", file=sys.stderr, flush=True)
    print(f"In-place float32 Sum allreduce, {args.np} ranks on one host, median time per launch; "
          f"median over {args.rounds} alternated rounds (min .. max).\n")
    table(args, kinds, runs)
    for n in notes:
        print(f"\nNote: {n}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"np": args.np, "sizes": args.sizes, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
