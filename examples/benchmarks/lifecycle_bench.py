"""Lifecycle benchmark: init() / one allreduce / shutdown(), many times in one process per rank.

    python3 examples/benchmarks/lifecycle_bench.py                  # 3 ranks, 200 cycles, Gloo then MPI
    python3 examples/benchmarks/lifecycle_bench.py --np 2 --cycles 50 --engines gloo

Each engine row is one launch (`dadtrun --gloo` / `dadtrun --mpi`) of this same file as a worker.
Every rank warms up with one cycle (what a library creates once per process, Open MPI's and Gloo's
own state, is not the lifecycle's), counts its threads, sockets and open descriptors, runs the
cycles, and counts again: the counts must not grow. Rank 0 reports the median and spread of the
cycle time (the slowest rank's, cycle by cycle). Exit status 1 when a count grew or a launch
failed. The table goes to docs/performance.md; the target there is a median under 50 ms.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _counts():
    fds = os.listdir("/proc/self/fd")
    sockets = 0
    for fd in fds:
        try:
            sockets += os.readlink("/proc/self/fd/" + fd).startswith("socket:")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return {"threads": len(os.listdir("/proc/self/task")), "sockets": sockets, "fds": len(fds)}


def worker(cycles):
    import torch
    import dadt.torch as dadt
    torch.set_num_threads(1)

    def cycle():
        dadt.init()
        out = dadt.allreduce(torch.ones(4), name="lifecycle", op=dadt.Sum)
        size = dadt.size()
        dadt.shutdown()
        assert out[0].item() == size, out

    cycle()
    before = _counts()
    times = []
    for _ in range(cycles):
        start = time.perf_counter()
        cycle()
        times.append(time.perf_counter() - start)
    after = _counts()
    # Gather every rank's times and counts on rank 0 through one last incarnation.
    dadt.init()
    everyone = dadt.allgather_object({"times": times, "before": before, "after": after})
    rank = dadt.rank()
    dadt.shutdown()
    if rank == 0:
        # Compact: the launcher relays lines in pieces of at most 4 KiB. A cycle lasts as long
        # as its slowest rank's.
        per_cycle = [round(max(r["times"][i] for r in everyone) * 1e3, 1) for i in range(cycles)]
        counts = {k: [sum(r[when][k] for r in everyone) for when in ("before", "after")]
                  for k in ("threads", "sockets", "fds")}
        print("RESULT " + json.dumps({"ms": per_cycle, "counts": counts}), flush=True)


def run_engine(engine, np, cycles, python):
    cmd = ["dadtrun", "--" + engine, "-np", str(np), python, os.path.abspath(__file__),
           "--worker", "--cycles", str(cycles)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1]), " ".join(cmd)
    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    raise RuntimeError("%s launch failed (exit %d)" % (engine, proc.returncode))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--np", type=int, default=3)
    p.add_argument("--cycles", type=int, default=200)
    p.add_argument("--engines", default="gloo,mpi")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.cycles)
        return 0
    rows, grew = [], False
    for engine in a.engines.split(","):
        result, cmd = run_engine(engine, a.np, a.cycles, sys.executable)
        per_cycle = result["ms"]
        q = statistics.quantiles(per_cycle, n=20, method="inclusive")  # q[0] p5, q[18] p95
        counts = []
        for key in ("threads", "sockets", "fds"):
            b, f = result["counts"][key]
            grew |= f > b
            counts.append("%d->%d" % (b, f))
        rows.append((engine, a.np, a.cycles, statistics.median(per_cycle), q[0], q[18],
                     max(per_cycle), *counts))
        print("+ " + cmd, flush=True)
    print()
    print("| engine | ranks | cycles | median ms/cycle | p5 | p95 | max | threads | sockets | fds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| %s | %d | %d | %.1f | %.1f | %.1f | %.1f | %s | %s | %s |" % r)
    print("\n(threads, sockets, fds: summed over the ranks, after one warm-up cycle -> after the "
          "last; they must not grow)")
    if grew:
        print("FAIL: a count grew over the cycles", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
