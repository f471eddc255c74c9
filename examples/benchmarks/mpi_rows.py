"""The MPI rows of allreduce_bench.py: dadt on MPI vs raw MPI_Allreduce, measured in the same run.

Plain-script mode of allreduce_bench.py calls `run()` after its Gloo tables. Each round runs
  raw MPI:  mpirun -np N raw_mpi_allreduce --sizes ... (examples/benchmarks/raw_mpi_allreduce.cc)
  dadt:     dadtrun --mpi -np N python allreduce_bench.py --dadt-sizes-only ...
one after the other (never at the same time), alternated for `rounds` rounds; each side reports the
median across rounds of its per-round medians. dadt's side is allreduce_ in place, float32, Sum.

On a shared machine the load drifts between the two launches, so dadt's workers also time plain
MPI_Allreduce (through mpi4py, on the same buffer and MPI_COMM_WORLD) interleaved with dadt's, one
iteration each in alternating order: the "same processes" columns compare the two under identical
load, which is the ratio to trust when the machine is busy.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT_FLAGS = ["--allow-run-as-root"] if os.geteuid() == 0 else []


def find_raw_mpi(explicit):
    from allreduce_bench import find_benchmark_binary  # same folder: one lookup for both baselines

    return find_benchmark_binary(explicit, "RAW_MPI_ALLREDUCE", "raw_mpi_allreduce")


def rank0_text(stdout):
    """What rank 0 printed under mpirun --tag-output: its chunks ("[jobid,0]<stdout>:...") joined, since a
    chunk may end mid-line; untagged output (raw_mpi_allreduce prints on rank 0 only) is returned as is."""
    parts = re.split(r"\[(?:\d+,)?(\d+)\]<stdout>:", stdout)
    if len(parts) == 1:
        return stdout
    return "".join(chunk for r, chunk in zip(parts[1::2], parts[2::2]) if r == "0")


def json_rows(stdout):
    """JSON objects printed one per line by rank 0."""
    rows = {}
    for line in rank0_text(stdout).splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[int(row["size_bytes"])] = row
    return rows


def raw_round(mpirun, binary, np_, sizes, iterations, warmups, quick, notes):
    groups = {}
    for s in sizes:
        groups.setdefault(iterations(s, quick), []).append(s)
    rows = {}
    for iters, group in sorted(groups.items(), reverse=True):
        cmd = [mpirun, *ROOT_FLAGS, "--oversubscribe", "--bind-to", "none", "-np", str(np_), binary,
               "--sizes", ",".join(map(str, group)), "--iters", str(iters), "--warmup", str(warmups(iters))]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            notes.append(f"raw MPI exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
            continue
        rows.update(json_rows(proc.stdout))
    return rows


def dadt_round(dadtrun, np_, sizes, quick, env, notes):
    cmd = [dadtrun, "--mpi", "-np", str(np_), sys.executable, os.path.join(REPO, "examples", "benchmarks",
                                                                           "allreduce_bench.py"),
           "--dadt-sizes-only", ",".join(map(str, sizes))] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        notes.append(f"dadt on MPI exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return {}
    return json_rows(proc.stdout)


def run(args, dadtrun, sizes, helpers, env, progress):
    """Measures and returns (rows, notes): rows[size] = {dadt_us, raw_us, dadt_busbw, raw_busbw}."""
    mpirun = shutil.which("mpirun")
    binary = find_raw_mpi(args.raw_mpi)
    notes = []
    if mpirun is None:
        return {}, ["MPI rows skipped: mpirun not found on PATH"]
    if binary is None:
        notes.append("raw MPI baseline skipped: raw_mpi_allreduce not found "
                     "(bazel build -c opt //examples/benchmarks:raw_mpi_allreduce, or pass --raw-mpi)")
    if args.np < 2:
        return {}, ["MPI rows skipped at 1 rank"]
    rounds = args.rounds or (1 if args.quick else 3)
    raw_rounds, dadt_rounds = [], []
    for r in range(rounds):
        if binary:
            progress(f"raw MPI, round {r + 1}/{rounds}")
            raw_rounds.append(raw_round(mpirun, binary, args.np, sizes, helpers["iterations"],
                                        helpers["warmups"], args.quick, notes))
        progress(f"dadt on MPI, round {r + 1}/{rounds}")
        dadt_rounds.append(dadt_round(dadtrun, args.np, sizes, args.quick, env, notes))
    rows = {}
    bw = helpers["bus_bandwidth_gbps"]
    for n in sizes:
        d = [x[n]["median_s"] for x in dadt_rounds if n in x]
        same = [x[n]["inproc_raw_s"] for x in dadt_rounds if n in x]
        g = [x[n]["median_us"] for x in raw_rounds if n in x]
        row = {"iters": helpers["iterations"](n, args.quick)}
        if d:
            row["dadt_us"] = statistics.median(d) * 1e6
            row["dadt_busbw"] = bw(n, row["dadt_us"] * 1e-6, args.np)
        if same:
            row["same_us"] = statistics.median(same) * 1e6
            row["same_busbw"] = bw(n, row["same_us"] * 1e-6, args.np)
        if g:
            row["raw_us"] = statistics.median(g)
            row["raw_busbw"] = bw(n, row["raw_us"] * 1e-6, args.np)
        rows[n] = row
    return rows, notes


def report(rows, notes, np_, sizes, human_bytes, fmt):
    print("")
    print(f"## (f) allreduce_ in place, float32, Sum on MPI: dadt (dadtrun --mpi) vs raw MPI_Allreduce "
          f"(alternated; median across rounds), {np_} ranks")
    print("")
    print("| size | iters | dadt median (us) | dadt busbw (GB/s) | raw MPI program median (us) "
          "| raw MPI program busbw (GB/s) | dadt / program busbw | MPI_Allreduce, same processes (us) "
          "| dadt / same-process busbw |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def ratio(r, key):
        return r["dadt_busbw"] / r[key] if r.get("dadt_busbw") and r.get(key) else None

    for n in sizes:
        r = rows.get(n, {})
        print(f"| {human_bytes(n)} | {r.get('iters', '')} | {fmt(r.get('dadt_us'))} | {fmt(r.get('dadt_busbw'), 3)} "
              f"| {fmt(r.get('raw_us'))} | {fmt(r.get('raw_busbw'), 3)} | {fmt(ratio(r, 'raw_busbw'), 2)} "
              f"| {fmt(r.get('same_us'))} | {fmt(ratio(r, 'same_busbw'), 2)} |")
    for note in notes:
        print(f"\n_{note}_")
    sys.stdout.flush()


def dadt_sizes_worker(sizes, quick, iterations, warmups):
    """Under dadtrun --mpi: dadt's allreduce_ and MPI_Allreduce (mpi4py) interleaved, one JSON line per
    size on rank 0 (median_s: dadt; inproc_raw_s: MPI_Allreduce in the same processes)."""
    import time

    import torch
    from mpi4py import MPI
    import dadt.torch as dadt

    torch.set_num_threads(1)
    dadt.init()
    comm = MPI.COMM_WORLD
    for n in sizes:
        t = torch.zeros(n // 4, dtype=torch.float32)  # zeros: repeated sums stay finite
        a = t.numpy()  # the same memory
        name = f"bench.mpi.{n}"
        iters = iterations(n, quick)
        for _ in range(warmups(iters)):
            dadt.allreduce_(t, name=name, op=dadt.Sum)
            comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        mine, raw = [], []
        for i in range(iters):
            for which in ((0, 1) if i % 2 else (1, 0)):
                comm.Barrier()
                start = time.perf_counter()
                if which:
                    dadt.allreduce_(t, name=name, op=dadt.Sum)
                else:
                    comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
                (mine if which else raw).append(time.perf_counter() - start)
        if dadt.rank() == 0:
            sys.stdout.write(json.dumps({"size_bytes": n, "iters": iters, "median_s": statistics.median(mine),
                                         "inproc_raw_s": statistics.median(raw),
                                         "mpi": dadt.mpi_enabled()}) + "\n")
            sys.stdout.flush()
    dadt.shutdown()
    return 0
