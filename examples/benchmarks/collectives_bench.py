"""How fast all-gather, reduce-scatter and allreduce move a fixed amount of data, cut into
tensors of several sizes, through dadt's runtime: the collectives behind the training modes (sync:
allreduce; dear: reduce-scatter, then all-gather).

Driver (a plain script): launches itself under dadtrun and prints one table.

    python examples/benchmarks/collectives_bench.py --np 2
    python examples/benchmarks/collectives_bench.py --np 2 --dadtrun-args "-H h1:1,h2:1 --network-interface dadt0"
    sudo examples/benchmarks/two_host_bench.sh     # runs this first, on the 1 Gbit/s link

Each row moves --total-mb of data (the allreduce's buffer; the all-gather's output; the
reduce-scatter's input) as --total-mb / size tensors, and reports the median time over --repeats (after one warm-up), and the rate at which
each rank's link carried it: a ring all-gather or reduce-scatter sends (n-1)/n of the data from
every rank, an allreduce twice that. --submit says how the tensors are handed over:
"together" (default: all at once, as dear's step() submits its all-gathers), "pipelined" (the next
one while the previous runs, as backward submits buckets), "one-by-one" (each waited for before
the next: every collective pays its own negotiation round). --busy-thread keeps a thread of matrix
products running beside each rank, as backward runs beside dear's reduce-scatters:

    python examples/benchmarks/collectives_bench.py --np 2 --sizes-mb 4 --submit one-by-one \
        --busy-thread --dadtrun-args "-H h1:1,h2:1 --network-interface dadt0 -x DADT_REALTIME_THREADS=0"
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

from allreduce_bench import find_dadtrun, worker_environment  # same folder

OPS = ("allgather", "reducescatter", "allreduce")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="driver: ranks")
    p.add_argument("--total-mb", type=int, default=44, help="MB moved per row (default 44)")
    p.add_argument("--sizes-mb", default="1,4,11,44", help="tensor sizes in MB (default 1,4,11,44)")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--submit", choices=["together", "pipelined", "one-by-one"], default="together",
                   help="how the tensors of a row are submitted (see above)")
    p.add_argument("--busy-thread", action="store_true",
                   help="each rank also runs a thread of matrix products meanwhile, as training's "
                        "backward runs beside dear's reduce-scatters")
    p.add_argument("--dadtrun", default=None, help="launcher (default: $DADTRUN, PATH, bazel-bin)")
    p.add_argument("--dadtrun-args", default="", help="extra launcher arguments, e.g. '-H a:1,b:1'")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker(args):
    import torch
    import dadt.torch as dadt
    torch.set_num_threads(1)
    dadt.init()
    n = dadt.size()
    busy = threading.Event()
    burner = None
    if args.busy_thread:
        def burn():  # the shapes of one of train_bench's layers in backward
            a, w = torch.randn(240, 1024), torch.randn(1024, 1024)
            while not busy.is_set():
                (a @ w).t() @ a
        burner = threading.Thread(target=burn, daemon=True)
        burner.start()
    rows = []
    for mb in [int(x) for x in args.sizes_mb.split(",")]:
        count = max(1, args.total_mb // mb)
        numel = mb * 1000 * 1000 // 4 // n * n  # divisible by n: equal shards
        full = [torch.ones(numel) for _ in range(count)]
        shards = [torch.ones(numel // n) for _ in range(count)]
        row = {"mb": mb, "count": count, "bytes": count * numel * 4}
        for op in OPS:
            times = []
            def submit(i):
                if op == "allgather":
                    return dadt.allgather_async(shards[i], name="ag%d.%d" % (mb, i), out=full[i])
                if op == "reducescatter":
                    return dadt.reducescatter_async(full[i], name="rs%d.%d" % (mb, i), out=shards[i])
                return dadt.allreduce_async_(full[i], name="ar%d.%d" % (mb, i))

            for it in range(args.repeats + 1):
                dadt.barrier()
                start = time.perf_counter()
                if args.submit == "together":
                    for h in [submit(i) for i in range(count)]:
                        dadt.synchronize(h)
                elif args.submit == "pipelined":
                    running = submit(0)
                    for i in range(1, count):
                        following = submit(i)
                        dadt.synchronize(running)
                        running = following
                    dadt.synchronize(running)
                else:
                    for i in range(count):
                        dadt.synchronize(submit(i))
                if it > 0:  # the first round is the warm-up
                    times.append(time.perf_counter() - start)
            row[op] = statistics.median(times)
        rows.append(row)
    busy.set()
    if burner:
        burner.join()
    if dadt.rank() == 0:
        print("RESULT " + json.dumps({"size": n, "rows": rows}), flush=True)
    dadt.shutdown()


def driver(args):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("collectives_bench: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    cmd = [dadtrun, "--gloo", "-np", str(args.np), *args.dadtrun_args.split(), sys.executable,
           os.path.abspath(__file__), "--worker", "--total-mb", str(args.total_mb), "--sizes-mb",
           args.sizes_mb, "--repeats", str(args.repeats), "--submit", args.submit]
    if args.busy_thread:
        cmd.append("--busy-thread")
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=worker_environment(), stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit("collectives_bench: the job failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))
    result = None
    for line in proc.stdout.splitlines():
        m = re.match(r"^(?:\[0\]<stdout>:)?RESULT (.*)$", line)
        if m:
            result = json.loads(m.group(1))
    if result is None:
        sys.exit("collectives_bench: no RESULT line from rank 0:\n" + proc.stdout[-3000:])
    n = result["size"]
    print("%d ranks (Gloo); each row moves %d MB, tensors submitted %s; median of %d; MB/s = bytes "
          "each rank sent / time%s\n" % (n, args.total_mb, args.submit, args.repeats,
                                          "; a busy compute thread beside each rank"
                                          if args.busy_thread else ""))
    print("| tensors | all-gather ms | MB/s | reduce-scatter ms | MB/s | allreduce ms | MB/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in result["rows"]:
        sent = (n - 1) / n * row["bytes"] / 1e6
        cells = []
        for op in OPS:
            factor = 2 if op == "allreduce" else 1
            cells += ["%.0f" % (1e3 * row[op]), "%.0f" % (factor * sent / row[op])]
        print("| %d x %d MB | %s |" % (row["count"], row["mb"], " | ".join(cells)))


def main():
    args = parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
