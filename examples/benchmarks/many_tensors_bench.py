"""Many small tensors against one big one: does a step's communication cost follow its bytes or its
tensor count? Prints a markdown table.

    python examples/benchmarks/many_tensors_bench.py --np 2                        # one host, Gloo
    python examples/benchmarks/many_tensors_bench.py --np 2 --launcher mpi         # one host, MPI
    python examples/benchmarks/many_tensors_bench.py --np 2 --hosts h1:1,h2:1 --network-interface dadt0

The 200 tensors of allreduce_bench.py's (c), 16 KiB to 1 MiB (47.6 MiB in all), float32, Sum, in
place, against one tensor of the same 47.6 MiB, through dadt in the same launch:
  fused       all 200 enqueued with allreduce_async_, then each synchronized (dadt fuses them);
  one tensor  one allreduce_ of the 47.6 MiB tensor;
  one by one  each of the 200 synchronized before the next is enqueued (no fusion).
Each repetition runs the three back to back, after a barrier, rotating which goes first, so a slow
spell of the machine hits all three alike; --launches repeats the whole launch. The table gives the
medians over every repetition of every launch, the spread (min .. max of the launches' medians),
and the ratios of the medians. The garbage collector is frozen after the warm-up (gc.freeze), so
that a collection of the framework's heap does not land in one contender's timing.
"""
import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time

from allreduce_bench import find_dadtrun, many_tensor_sizes, worker_environment  # same folder

MiB = 1024 * 1024
CONTENDERS = ("fused", "one tensor", "one by one")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--hosts", default=None, help="dadtrun -H list, e.g. h1:1,h2:1 (default: this host)")
    p.add_argument("--network-interface", default=None, help="dadtrun --network-interface")
    p.add_argument("--launcher", choices=("gloo", "mpi"), default="gloo", help="dadtrun --gloo or --mpi")
    p.add_argument("--reps", type=int, default=15, help="repetitions per launch (default 15)")
    p.add_argument("--launches", type=int, default=3, help="launches (default 3)")
    p.add_argument("--dadtrun", default=None, help="launcher (default: dadtrun on PATH)")
    p.add_argument("--json", default=None, help="also write the measurements here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args):
    import torch
    import dadt.torch as dadt
    torch.set_num_threads(1)
    dadt.init()
    sizes = many_tensor_sizes()
    tensors = [torch.zeros(n // 4) for n in sizes]
    names = ["many.%d" % i for i in range(len(tensors))]
    big = torch.zeros(sum(sizes) // 4)

    def fused():
        for h in [dadt.allreduce_async_(t, name=n, op=dadt.Sum) for t, n in zip(tensors, names)]:
            dadt.synchronize(h)

    def one_tensor():
        dadt.allreduce_(big, name="many.one", op=dadt.Sum)

    def one_by_one():
        for t, n in zip(tensors, names):
            dadt.allreduce_(t, name=n, op=dadt.Sum)

    runs = dict(zip(CONTENDERS, (fused, one_tensor, one_by_one)))
    for f in runs.values():  # warm-up: buffers, the response cache
        f(), f()
    gc.collect()
    gc.freeze()
    seconds = {k: [] for k in CONTENDERS}
    for rep in range(args.reps):
        order = CONTENDERS[rep % 3:] + CONTENDERS[:rep % 3]
        for k in order:
            dadt.barrier()
            t0 = time.perf_counter()
            runs[k]()
            seconds[k].append(time.perf_counter() - t0)
    if dadt.rank() == 0:
        print("RESULT " + json.dumps({"seconds": seconds, "total_bytes": sum(sizes), "tensors": len(sizes)}),
              flush=True)
    dadt.shutdown()


def launch(args):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("many_tensors_bench: dadtrun not found (install dadt, or use --dadtrun)")
    where = (["-H", args.hosts] if args.hosts else []) + \
            (["--network-interface", args.network_interface] if args.network_interface else [])
    cmd = [dadtrun, "--" + args.launcher, "-np", str(args.np), *where, sys.executable, os.path.abspath(__file__),
           "--worker", "--reps", str(args.reps)]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=worker_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        m = re.search(r"RESULT (\{.*\})$", line)
        if m and proc.returncode == 0:
            return json.loads(m.group(1))
    sys.exit("many_tensors_bench: the launch failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))


def report(args, launches):
    med = statistics.median
    every = {k: [s for run in launches for s in run["seconds"][k]] for k in CONTENDERS}
    per_launch = {k: [med(run["seconds"][k]) for run in launches] for k in CONTENDERS}
    first = launches[0]
    where = args.hosts or "one host"
    print("### %d tensors of 16 KiB .. 1 MiB (%.1f MiB in all) against one tensor of the same bytes: %d ranks, "
          "%s, %s; %d launches x %d repetitions" % (first["tensors"], first["total_bytes"] / MiB, args.np, where,
                                                     args.launcher.upper() if args.launcher == "mpi" else "Gloo",
                                                     len(launches), args.reps))
    print()
    print("| | median (ms) | launches' medians (ms) | / one tensor |")
    print("| --- | ---: | ---: | ---: |")
    one = med(every["one tensor"])
    for k in CONTENDERS:
        m = med(every[k])
        print("| %s | %.1f | %s | %.2fx |" % (k, 1e3 * m, ", ".join("%.1f" % (1e3 * v) for v in per_launch[k]),
                                               m / one))


def main():
    args = parse_args()
    if args.worker:
        worker(args)
        return
    launches = [launch(args) for _ in range(args.launches)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "launches": launches}, f, indent=2)
    report(args, launches)


if __name__ == "__main__":
    main()
