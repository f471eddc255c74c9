"""dadt allreduce benchmark: dadt vs raw Gloo, tensor fusion, idle CPU. Prints markdown tables.

    python examples/benchmarks/allreduce_bench.py --np 2           # full run, a few minutes on 2 cores
    python examples/benchmarks/allreduce_bench.py --np 2 --quick   # short run
    dadtrun --gloo -np 2 python examples/benchmarks/allreduce_bench.py   # same, launched by hand

Run as a plain script, it starts itself under `dadtrun --gloo -np N` and prints rank 0's tables
without the launcher's "[0]<stdout>:" prefix. Under dadtrun every rank first runs the raw Gloo
baseline (examples/benchmarks/raw_gloo_allreduce, one process per rank, started by this rank)
before dadt.init(), so the two never compete for the CPU, then measures dadt:

  (a) dadt.torch.allreduce_ (in place, float32, Sum), median time and bus bandwidth per size,
  (b) raw Gloo's median and bus bandwidth for the same sizes, and the ratio of the medians,
  (c) 200 tensors of 16 KiB .. 1 MiB: all enqueued at once (fused, default threshold) vs one
      allreduce at a time (each synchronized before the next is enqueued),
  (d) CPU used by each process while the runtime is initialised and idle.
Then, when mpirun is on PATH (--mpi auto), the same allreduce on MPI (examples/benchmarks/mpi_rows.py):
  (f) dadt under `dadtrun --mpi` vs raw MPI_Allreduce (raw_mpi_allreduce under mpirun), alternated.

Only medians are reported. examples/benchmarks/README.md explains every column.
"""
import argparse
import glob
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KiB, MiB = 1024, 1024 * 1024
FULL_SIZES = [4 ** k for k in range(1, 15)]  # 4 B .. 256 MiB (includes 4 KiB and 64 MiB)
QUICK_SIZES = [4, 1 * KiB, 4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB]
MANY_TENSORS = 200


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks to launch (plain-script mode; default 2)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations (well under a minute)")
    p.add_argument("--max-size", type=int, default=None, help="largest allreduce in bytes (default 256 MiB)")
    p.add_argument("--idle-seconds", type=float, default=None, help="length of the idle-CPU window (5; quick 2)")
    p.add_argument("--reps", type=int, default=None, help="repetitions of the many-tensors test (10; quick 3)")
    p.add_argument("--dadtrun", default=None, help="launcher (default: $DADTRUN, dadtrun on PATH, bazel-bin)")
    p.add_argument("--raw-gloo", default=None,
                   help="raw_gloo_allreduce binary (default: $RAW_GLOO_ALLREDUCE, PATH, bazel-bin); 'none' skips it")
    p.add_argument("--rounds", type=int, default=None,
                   help="alternate raw Gloo and dadt this many times; medians across rounds (3; quick 1)")
    p.add_argument("--json", default=None, help="also write every measurement to this file (rank 0)")
    p.add_argument("--mpi", choices=("auto", "off"), default="auto",
                   help="also measure dadt on MPI vs raw MPI_Allreduce when mpirun is on PATH (default auto)")
    p.add_argument("--raw-mpi", default=None,
                   help="raw_mpi_allreduce binary (default: $RAW_MPI_ALLREDUCE, PATH, bazel-bin); 'none' skips it")
    p.add_argument("--min-size", type=int, default=None, help="smallest allreduce in bytes (default 4)")
    p.add_argument("--skip-gloo", action="store_true", help="only the MPI rows (f)")
    p.add_argument("--dadt-sizes-only", default=None, help=argparse.SUPPRESS)  # mpi_rows.py's worker
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# Formatting helpers
# ----------------------------------------------------------------------------------------------

def human_bytes(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def bus_bandwidth_gbps(nbytes, seconds, size):
    """nccl-tests' bus bandwidth: 2(n-1)/n * bytes / time, in GB/s (1e9 bytes/s)."""
    if size < 2 or seconds <= 0:
        return None
    return 2.0 * (size - 1) / size * nbytes / seconds / 1e9


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


def iterations(nbytes, quick):
    """Timed iterations per size: about `budget` bytes per size, clamped."""
    budget, lo, hi = (256 * MiB, 3, 30) if quick else (2048 * MiB, 5, 200)
    return max(lo, min(hi, budget // max(nbytes, 1)))


def warmups(iters):
    return max(2, iters // 10)


# ----------------------------------------------------------------------------------------------
# Plain-script mode: start ourselves under dadtrun
# ----------------------------------------------------------------------------------------------

def find_dadtrun(explicit):
    candidates = [explicit, os.environ.get("DADTRUN"), shutil.which("dadtrun"),
                  os.path.join(REPO, "bazel-bin", "dadtrun", "dadtrun")]
    candidates += sorted(glob.glob(os.path.join(REPO, "bazel-out", "*", "bin", "dadtrun", "dadtrun")))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _imports_dadt(env):
    probe = subprocess.run([sys.executable, "-c", "import dadt._core, dadt.torch"], env=env, cwd="/",
                           capture_output=True, timeout=120)
    return probe.returncode == 0


def worker_environment():
    env = dict(os.environ)
    if not _imports_dadt(env):  # not installed: try the source tree (a built _core.so in place)
        src = os.path.join(REPO, "frameworks", "python")
        with_src = dict(env, PYTHONPATH=src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""))
        if _imports_dadt(with_src):
            env = with_src
    return env


def launch(args, argv):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("allreduce_bench: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    forwarded = []
    skip = False
    for a in argv:  # everything but --np (the launcher gets it)
        if skip:
            skip = False
            continue
        if a == "--np":
            skip = True
            continue
        if a.startswith("--np="):
            continue
        forwarded.append(a)
    cmd = [dadtrun, "--gloo", "-np", str(args.np), sys.executable, os.path.abspath(__file__), *forwarded]
    rc = 0
    if not args.skip_gloo:
        print(f"+ {' '.join(cmd)}", file=sys.stderr, flush=True)
        proc = subprocess.Popen(cmd, env=worker_environment(), stdout=subprocess.PIPE, text=True, bufsize=1)
        prefix = re.compile(r"^\[0\]<stdout>:")
        for line in proc.stdout:
            sys.stdout.write(prefix.sub("", line))
            sys.stdout.flush()
        rc = proc.wait()
    if args.mpi != "off":
        import mpi_rows

        sizes = list(QUICK_SIZES if args.quick else FULL_SIZES)
        if args.max_size is not None:
            sizes = [s for s in sizes if s <= args.max_size]
        if args.min_size is not None:
            sizes = [s for s in sizes if s >= args.min_size]
        helpers = {"iterations": iterations, "warmups": warmups, "bus_bandwidth_gbps": bus_bandwidth_gbps}
        rows, notes = mpi_rows.run(args, dadtrun, sizes, helpers, worker_environment(),
                                   lambda m: print(f"allreduce_bench: {m}", file=sys.stderr, flush=True))
        mpi_rows.report(rows, notes, args.np, sizes, human_bytes, fmt)
    return rc


# ----------------------------------------------------------------------------------------------
# Worker mode (under dadtrun): raw Gloo first, then dadt
# ----------------------------------------------------------------------------------------------

def find_benchmark_binary(explicit, env_var, name):
    """A baseline binary: `explicit` ('none' skips), $env_var, PATH, then the Bazel outputs."""
    if explicit == "none":
        return None
    candidates = [explicit, os.environ.get(env_var), shutil.which(name),
                  os.path.join(REPO, "bazel-bin", "examples", "benchmarks", name)]
    candidates += sorted(glob.glob(os.path.join(REPO, "bazel-out", "*", "bin", "examples", "benchmarks", name)))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def find_raw_gloo(explicit):
    return find_benchmark_binary(explicit, "RAW_GLOO_ALLREDUCE", "raw_gloo_allreduce")


def job_scratch_dir():
    """A directory name that every rank of this job computes alike (from the launcher's job secret)."""
    key = "|".join(os.environ.get(k, "") for k in ("DADT_RENDEZVOUS_ADDR", "DADT_RENDEZVOUS_PORT", "DADT_SECRET"))
    return os.path.join(tempfile.gettempdir(), "dadt-bench-" + hashlib.sha256(key.encode()).hexdigest()[:16])


def run_raw_gloo(binary, sizes, quick, rank, scratch):
    """Runs the baseline once per group of sizes with the same iteration count. Returns {size: row} on rank 0."""
    groups = {}
    for s in sizes:
        groups.setdefault(iterations(s, quick), []).append(s)
    results, notes = {}, []
    for i, (iters, group) in enumerate(sorted(groups.items(), reverse=True)):
        store = os.path.join(scratch, f"gloo-store-{i}")  # a fresh, empty store per launch
        os.makedirs(store, exist_ok=True)
        cmd = [binary, "--store-dir", store, "--sizes", ",".join(map(str, group)), "--iters", str(iters),
               "--warmup", str(warmups(iters)), "--timeout-s", "120"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            notes.append(f"raw Gloo timed out for sizes {group}")
            continue
        if proc.returncode != 0:
            notes.append(f"raw Gloo exited {proc.returncode} on rank {rank}: {proc.stderr.strip()[-300:]}")
            continue
        for line in proc.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                results[int(row["size_bytes"])] = row
    return results, notes


def median_seconds(samples):
    return statistics.median(samples) if samples else None


def bench_dadt_sizes(dadt, torch, sizes, quick):
    rows = {}
    for nbytes in sizes:
        t = torch.zeros(nbytes // 4, dtype=torch.float32)  # zeros: repeated sums stay finite
        name = f"bench.allreduce.{nbytes}"
        iters = iterations(nbytes, quick)
        for _ in range(warmups(iters)):
            dadt.allreduce_(t, name=name, op=dadt.Sum)
        samples = []
        for _ in range(iters):
            start = time.perf_counter()
            dadt.allreduce_(t, name=name, op=dadt.Sum)
            samples.append(time.perf_counter() - start)
        rows[nbytes] = {"median_s": median_seconds(samples), "iters": iters,
                        "min_s": min(samples), "max_s": max(samples)}
        del t
    return rows


def many_tensor_sizes():
    """200 sizes spread geometrically from 16 KiB to 1 MiB (multiples of 4 bytes)."""
    lo, hi = 16 * KiB, 1 * MiB
    return [int(round(lo * (hi / lo) ** (i / (MANY_TENSORS - 1)) / 4)) * 4 for i in range(MANY_TENSORS)]


def bench_many_tensors(dadt, torch, reps):
    tensors = [torch.zeros(n // 4, dtype=torch.float32) for n in many_tensor_sizes()]
    names = [f"bench.many.{i}" for i in range(len(tensors))]

    def fused():
        start = time.perf_counter()
        handles = [dadt.allreduce_async_(t, name=n, op=dadt.Sum) for t, n in zip(tensors, names)]
        for h in handles:
            dadt.synchronize(h)
        return time.perf_counter() - start

    def one_by_one():
        start = time.perf_counter()
        for t, n in zip(tensors, names):
            dadt.allreduce_(t, name=n, op=dadt.Sum)
        return time.perf_counter() - start

    fused(), one_by_one()  # warm-up (response cache, buffers)
    f, s = [], []
    for _ in range(reps):  # interleaved, so drift on a shared machine hits both alike
        f.append(fused())
        s.append(one_by_one())
    return {"tensors": len(tensors), "total_bytes": sum(many_tensor_sizes()), "fused_median_s": median_seconds(f),
            "one_by_one_median_s": median_seconds(s), "reps": reps}


def bench_timeline_overhead(dadt, torch, reps):
    """(e) The same workloads with the timeline off and on, interleaved, medians of each."""
    tensors = [torch.zeros(n // 4, dtype=torch.float32) for n in many_tensor_sizes()]
    names = [f"bench.tl.{i}" for i in range(len(tensors))]
    small = torch.zeros(1024, dtype=torch.float32)  # 4 KiB

    def fused():
        start = time.perf_counter()
        for h in [dadt.allreduce_async_(t, name=n, op=dadt.Sum) for t, n in zip(tensors, names)]:
            dadt.synchronize(h)
        return time.perf_counter() - start

    def small_loop(iters=200):
        start = time.perf_counter()
        for _ in range(iters):
            dadt.allreduce_(small, name="bench.tl.small", op=dadt.Sum)
        return (time.perf_counter() - start) / iters

    path = os.path.join(tempfile.mkdtemp(prefix="dadt-bench-tl-"), "timeline.json")
    fused(), small_loop(20)  # warm-up
    rows = {"fused_off": [], "fused_on": [], "small_off": [], "small_on": []}
    for _ in range(reps):
        rows["fused_off"].append(fused())
        rows["small_off"].append(small_loop())
        dadt.start_timeline(path)  # rank 0 writes; a no-op elsewhere
        rows["fused_on"].append(fused())
        rows["small_on"].append(small_loop())
        dadt.stop_timeline()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return {k: median_seconds(v) for k, v in rows.items()} | {"reps": reps}


def measure_idle(dadt, seconds):
    dadt.barrier()
    time.sleep(0.5)  # let the last collective's tail settle
    r0, c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.monotonic()
    time.sleep(seconds)
    r1, c1, w1 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.monotonic()
    wall = w1 - w0
    return {"wall_s": wall, "user_s": r1.ru_utime - r0.ru_utime, "sys_s": r1.ru_stime - r0.ru_stime,
            "process_time_s": c1 - c0, "percent_of_core": 100.0 * (c1 - c0) / wall}


def worker(args):
    rank, size = int(os.environ["DADT_RANK"]), int(os.environ["DADT_SIZE"])
    quick = args.quick
    sizes = list(QUICK_SIZES if quick else FULL_SIZES)
    if args.max_size is not None:
        sizes = [s for s in sizes if s <= args.max_size]
    if args.min_size is not None:
        sizes = [s for s in sizes if s >= args.min_size]
    reps = args.reps or (3 if quick else 10)
    idle_s = args.idle_seconds or (2.0 if quick else 5.0)
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    progress = (lambda m: print(f"allreduce_bench: {m}", file=sys.stderr, flush=True)) if rank == 0 else (
        lambda m: None)

    # (a, b) raw Gloo and dadt, alternated for `rounds` rounds so that drift on a shared machine
    # hits both alike; each is the median across rounds of its per-round medians. The first raw
    # round runs before dadt exists in this process; later ones run while dadt sits idle (its loop
    # thread sleeps in poll(), so the two never compete for the CPU).
    rounds = args.rounds or (1 if quick else 3)
    scratch = job_scratch_dir()
    raw_binary = find_raw_gloo(args.raw_gloo)
    raw_rounds, mine_rounds, raw_notes = [], [], []
    if raw_binary is None:
        raw_notes.append("raw Gloo baseline skipped: raw_gloo_allreduce not found "
                         "(bazel build //examples/benchmarks:raw_gloo_allreduce, or pass --raw-gloo)")
    elif size < 2:
        raw_notes.append("raw Gloo baseline skipped at 1 rank")

    def raw_round(r):
        if raw_binary is None or size < 2:
            return
        progress(f"raw Gloo, round {r + 1}/{rounds}: {len(sizes)} sizes ({raw_binary})")
        rows, notes = run_raw_gloo(raw_binary, sizes, quick, rank, os.path.join(scratch, f"round{r}"))
        raw_rounds.append(rows)
        raw_notes.extend(notes)

    raw_round(0)
    import torch
    import dadt.torch as dadt

    torch.set_num_threads(1)
    dadt.init()
    dadt.barrier()
    for r in range(rounds):
        if r > 0:
            dadt.barrier()
            raw_round(r)
            dadt.barrier()
        progress(f"dadt, round {r + 1}/{rounds}: {len(sizes)} sizes")
        mine_rounds.append(bench_dadt_sizes(dadt, torch, sizes, quick))
    dadt.barrier()
    if rank == 0:
        shutil.rmtree(scratch, ignore_errors=True)
    mine = {n: dict(mine_rounds[0][n], median_s=statistics.median(m[n]["median_s"] for m in mine_rounds))
            for n in sizes}
    raw = {}
    for n in sizes:
        rows = [rr[n] for rr in raw_rounds if n in rr]
        if rows:
            raw[n] = dict(rows[0], median_us=statistics.median(x["median_us"] for x in rows),
                          busbw_gbps=statistics.median(x["busbw_gbps"] for x in rows))

    progress(f"dadt: {MANY_TENSORS} tensors fused vs one at a time, {reps} repetitions")
    many = bench_many_tensors(dadt, torch, reps)
    progress(f"timeline off vs on, {reps} repetitions")
    timeline = bench_timeline_overhead(dadt, torch, reps)
    progress(f"idle CPU: {idle_s:.0f} s")
    idle = dadt.allgather_object(measure_idle(dadt, idle_s))

    if rank == 0:
        report(say, size, sizes, mine, raw, raw_notes, many, idle, quick, timeline)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "quick": quick, "dadt": mine, "raw_gloo": raw, "raw_gloo_notes": raw_notes,
                           "many_tensors": many, "idle": idle, "timeline": timeline}, f, indent=2)
    dadt.shutdown()
    return 0


def report(say, size, sizes, mine, raw, raw_notes, many, idle, quick, timeline):
    import torch
    import dadt

    env_knobs = ", ".join(f"{k}={os.environ[k]}" for k in ("DADT_FUSION_THRESHOLD", "DADT_CYCLE_TIME")
                          if k in os.environ) or "defaults"
    say(f"# dadt allreduce benchmark{' (quick)' if quick else ''}")
    say("")
    say(f"{size} ranks on one host ({os.cpu_count()} cores), Gloo backend, {env_knobs}; "
        f"dadt {getattr(dadt, '__version__', '?')}, torch {torch.__version__}, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
    say("")
    say("## (a, b) allreduce_ in place, float32, Sum: dadt vs raw Gloo (alternated; median across rounds)")
    say("")
    say("| size | iters | dadt median (us) | dadt busbw (GB/s) | raw Gloo median (us) | raw Gloo busbw (GB/s) "
        "| dadt / Gloo time |")
    say("|---:|---:|---:|---:|---:|---:|---:|")
    for nbytes in sizes:
        m = mine[nbytes]
        d_us = m["median_s"] * 1e6
        g = raw.get(nbytes)
        g_us = g["median_us"] if g else None
        ratio = d_us / g_us if g_us else None
        d_bw = bus_bandwidth_gbps(nbytes, m["median_s"], size)
        g_bw = g["busbw_gbps"] if g and size > 1 else None
        say(f"| {human_bytes(nbytes)} | {m['iters']} | {d_us:.1f} | {fmt(d_bw, 3)} "
            f"| {fmt(g_us)} | {fmt(g_bw, 3)} | {fmt(ratio, 2)} |")
    for note in raw_notes:
        say(f"\n_{note}_")
    say("")
    say(f"## (c) {many['tensors']} tensors of 16 KiB .. 1 MiB ({human_bytes(many['total_bytes'])} in all), "
        f"median of {many['reps']}")
    say("")
    say("| fused: all enqueued, then synchronized (ms) | one at a time (ms) | one at a time / fused "
        "| fused busbw (GB/s) |")
    say("|---:|---:|---:|---:|")
    fused, single = many["fused_median_s"], many["one_by_one_median_s"]
    say(f"| {fused * 1e3:.1f} | {single * 1e3:.1f} | {single / fused:.2f} "
        f"| {fmt(bus_bandwidth_gbps(many['total_bytes'], fused, size), 3)} |")
    say("")
    say(f"## (d) idle runtime: CPU time over {idle[0]['wall_s']:.1f} s of sleep after init and traffic")
    say("")
    say("| rank | user (s) | system (s) | % of one core |")
    say("|---:|---:|---:|---:|")
    for r, row in enumerate(idle):
        say(f"| {r} | {row['user_s']:.3f} | {row['sys_s']:.3f} | {row['percent_of_core']:.1f} |")
    say(f"| median | | | {statistics.median(row['percent_of_core'] for row in idle):.1f} |")
    say("")
    say(f"## (e) timeline off vs on (rank 0 writing the trace), median of {timeline['reps']}, interleaved")
    say("")
    say("| workload | off | on | throughput on / off |")
    say("|---|---:|---:|---:|")
    say(f"| 200 tensors fused (ms) | {timeline['fused_off'] * 1e3:.1f} | {timeline['fused_on'] * 1e3:.1f} "
        f"| {timeline['fused_off'] / timeline['fused_on']:.3f} |")
    say(f"| 4 KiB allreduce (us) | {timeline['small_off'] * 1e6:.1f} | {timeline['small_on'] * 1e6:.1f} "
        f"| {timeline['small_off'] / timeline['small_on']:.3f} |")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.dadt_sizes_only:
        import mpi_rows

        sizes = [int(x) for x in args.dadt_sizes_only.split(",")]
        return mpi_rows.dadt_sizes_worker(sizes, args.quick, iterations, warmups)
    if "DADT_RANK" in os.environ and "DADT_SIZE" in os.environ:
        return worker(args)
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
