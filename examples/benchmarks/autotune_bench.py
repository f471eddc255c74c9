"""dadt autotune benchmark: default settings vs an exhaustive grid vs `dadtrun --autotune`.

    python examples/benchmarks/autotune_bench.py            # full run, ~5-10 minutes on 2 cores
    python examples/benchmarks/autotune_bench.py --quick    # smaller grid, fewer steps

Run as a plain script, it launches itself many times under `dadtrun --gloo -np 2` (one launch per
setting), each launch training the same fixed synthetic workload (worker mode, --worker): an MLP
of 20 Linear layers of mixed widths (~3.3M parameters, 40 gradient tensors from 0.5 KiB to
4 MiB, biases below DADT_EAGER_THRESHOLD), synthetic data, SGD wrapped in
dadt.torch.DistributedOptimizer, torch.set_num_threads(1), fixed seeds. It compares

  (a) default settings (no knob given),
  (b) every point of a grid fusion threshold x cycle time, each passed as
      --fusion-threshold-mb / --cycle-time-ms,
  (c) --autotune with a CSV log: the worker first runs the tuner's whole budget,
      (warmup + max_samples) x steps_per_sample steps plus a margin, then keeps going in chunks
      until rank 0 sees the CSV's `best` row (the tuner has settled), and only then times steps,
  (d) (full run) the autotune-chosen setting again, passed as fixed flags, then the best grid
      point and the default again, one after the other, as a check on the machine's drift.

Throughput is global samples/s = ranks x batch / median step time on rank 0 (median over the
timed steps; only medians are reported). Prints a markdown table, the line
"autotune reaches X% of the best grid point after N samples", and draws the search (CSV samples
in the fusion/cycle plane, coloured by score, grid best and chosen point marked) to --plot.
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


from allreduce_bench import find_dadtrun  # same folder: one launcher lookup for both benchmarks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1024 * 1024
# Layer widths: 20 Linear layers, mixed sizes (weights 0.5 KiB .. 4 MiB).
WIDTHS = [256, 1024, 512, 1024, 256, 768, 128, 1024, 640, 64, 512, 896, 256, 384, 1024, 320,
          512, 192, 768, 256, 10]
BATCH = 32
FULL_GRID = ([0, 1, 4, 16, 64], [1, 5, 20, 50])
QUICK_GRID = ([0, 4, 64], [1, 20])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3x2 grid, fewer timed steps, no re-check")
    p.add_argument("--plot", default=os.path.join(REPO, "docs", "images", "autotune_search.png"),
                   help="where to save the search plot (default docs/images/autotune_search.png)")
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--warmup-steps", type=int, default=None, help="untimed steps per fixed run (15; quick 10)")
    p.add_argument("--timed-steps", type=int, default=None, help="timed steps per run (40; quick 25)")
    p.add_argument("--autotune-warmup-samples", type=int, default=2)
    p.add_argument("--autotune-steps-per-sample", type=int, default=5)
    p.add_argument("--autotune-bayes-opt-max-samples", type=int, default=20)
    p.add_argument("--autotune-gaussian-process-noise", type=float, default=None,
                   help="passed on when given (dadt's default 0.8)")
    p.add_argument("--log-dir", default=None, help="keep the CSV log and per-run JSON here (default: temp)")
    p.add_argument("--dadtrun", default=None, help="launcher (default: $DADTRUN, dadtrun on PATH, bazel-bin)")
    # worker mode (internal)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tune-steps", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--tune-log", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# Worker: one training run under dadtrun
# ----------------------------------------------------------------------------------------------

def worker(args):
    import torch
    import dadt.torch as dt

    torch.set_num_threads(1)
    torch.manual_seed(1234)
    dt.init()
    layers = []
    for i in range(len(WIDTHS) - 1):
        layers.append(torch.nn.Linear(WIDTHS[i], WIDTHS[i + 1]))
        if i < len(WIDTHS) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    dt.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = dt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                  named_parameters=model.named_parameters())
    g = torch.Generator().manual_seed(42 + dt.rank())
    x = torch.randn(BATCH, WIDTHS[0], generator=g)
    y = torch.randint(0, WIDTHS[-1], (BATCH,), generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    def tuner_settled():
        if dt.rank() != 0 or not args.tune_log:
            return 0.0
        try:
            with open(args.tune_log) as f:
                return 1.0 if any(line.startswith("best,") for line in f) else 0.0
        except OSError:
            return 0.0

    steps_run = 0
    for _ in range(args.warmup_steps):
        step()
        steps_run += 1
    settled_at = None
    if args.tune_steps:
        while steps_run < args.tune_steps:
            step()
            steps_run += 1
        # Keep training in chunks until rank 0 has seen the `best` row; all ranks agree by allreduce.
        for _ in range(100):
            flag = dt.allreduce(torch.tensor([tuner_settled()]), name="autotune_bench.settled", op=dt.Sum)
            if flag.item() > 0:
                settled_at = steps_run
                break
            for _ in range(10):
                step()
                steps_run += 1
    times = [step() for _ in range(args.timed_steps)]
    if dt.rank() == 0:
        med = statistics.median(times)
        out = {"median_step_s": med, "samples_per_s": dt.size() * BATCH / med,
               "params": sum(p.numel() for p in model.parameters()),
               "tensors": sum(1 for _ in model.parameters()),
               "steps_before_timing": steps_run, "settled_at_step": settled_at}
        with open(args.result, "w") as f:
            json.dump(out, f)
    dt.shutdown()


# ----------------------------------------------------------------------------------------------
# Driver: launches and report
# ----------------------------------------------------------------------------------------------

def run_one(args, dadtrun, tmp, label, launcher_flags, worker_flags):
    result = os.path.join(tmp, re.sub(r"[^A-Za-z0-9_.-]", "_", label) + ".json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DADT_")}  # only our flags count
    cmd = [dadtrun, "--gloo", "-np", str(args.np), *launcher_flags, sys.executable, os.path.abspath(__file__),
           "--worker", "--result", result, "--warmup-steps", str(args.warmup_steps),
           "--timed-steps", str(args.timed_steps), *worker_flags]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not os.path.exists(result):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        sys.exit(f"autotune_bench: run '{label}' failed (rc {proc.returncode}): {' '.join(cmd)}")
    with open(result) as f:
        r = json.load(f)
    r["stderr"] = proc.stderr
    print(f"  {label:<28} {r['samples_per_s']:8.1f} samples/s  ({time.time() - t0:4.1f} s)",
          file=sys.stderr, flush=True)
    return r


def fmt_mb(x):
    return f"{x:g}"


def driver(args):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("autotune_bench: dadtrun not found (use --dadtrun or install dadt)")
    fusions, cycles = QUICK_GRID if args.quick else FULL_GRID
    tmp = args.log_dir or tempfile.mkdtemp(prefix="autotune_bench.")
    os.makedirs(tmp, exist_ok=True)
    csv_path = os.path.join(tmp, "autotune.csv")
    if os.path.exists(csv_path):
        os.remove(csv_path)
    t_start = time.time()
    print(f"autotune_bench: {len(fusions) * len(cycles)} grid points + default + autotune; logs in {tmp}",
          file=sys.stderr, flush=True)

    rows = []  # (setting, result)
    default = run_one(args, dadtrun, tmp, "default", [], [])
    rows.append(("default (no flags)", default))
    grid = {}
    for f_mb in fusions:
        for c_ms in cycles:
            r = run_one(args, dadtrun, tmp, f"grid f={f_mb} c={c_ms}",
                        ["--fusion-threshold-mb", str(f_mb), "--cycle-time-ms", str(c_ms)], [])
            grid[(f_mb, c_ms)] = r
    at = args
    tune_flags = ["--autotune", "--autotune-log-file", csv_path,
                  "--autotune-warmup-samples", str(at.autotune_warmup_samples),
                  "--autotune-steps-per-sample", str(at.autotune_steps_per_sample),
                  "--autotune-bayes-opt-max-samples", str(at.autotune_bayes_opt_max_samples)]
    if at.autotune_gaussian_process_noise is not None:
        tune_flags += ["--autotune-gaussian-process-noise", str(at.autotune_gaussian_process_noise)]
    # The tuner's budget in steps, plus a margin (its first step starts at the first allreduce).
    budget = (at.autotune_warmup_samples + at.autotune_bayes_opt_max_samples) * at.autotune_steps_per_sample + 5
    tuned = run_one(args, dadtrun, tmp, "autotune", tune_flags,
                    ["--tune-steps", str(budget), "--tune-log", csv_path])
    summary = next((line.strip() for line in tuned["stderr"].splitlines() if "autotune: chose" in line), "")
    summary = re.sub(r"^.*?(\[dadt\] autotune)", r"\1", summary)

    samples, best_row = [], None
    with open(csv_path) as f:
        for rec in csv.DictReader(f):
            item = (float(rec["fusion_threshold_bytes"]) / MiB, float(rec["cycle_time_ms"]),
                    float(rec["score_bytes_per_sec"]))
            if rec["sample"] == "best":
                best_row = item
            else:
                samples.append(item)
    if best_row is None:
        sys.exit("autotune_bench: the CSV has no `best` row; the tuner did not settle")

    best_key = max(grid, key=lambda k: grid[k]["samples_per_s"])
    best_tp = grid[best_key]["samples_per_s"]
    recheck = []
    if not args.quick:
        c_f, c_c = best_row[0], best_row[1]
        recheck.append((f"re-run: chosen as flags ({c_f:.2f} MiB, {c_c:.2f} ms)",
                        run_one(args, dadtrun, tmp, "chosen as flags",
                                ["--fusion-threshold-mb", f"{c_f:.4f}", "--cycle-time-ms", f"{c_c:.4f}"], [])))
        recheck.append((f"re-run: best grid point ({fmt_mb(best_key[0])} MiB, {best_key[1]} ms)",
                        run_one(args, dadtrun, tmp, "best grid again",
                                ["--fusion-threshold-mb", str(best_key[0]), "--cycle-time-ms", str(best_key[1])], [])))
        recheck.append(("re-run: default (no flags)", run_one(args, dadtrun, tmp, "default again", [], [])))

    for (f_mb, c_ms), r in sorted(grid.items()):
        rows.append((f"grid: fusion {fmt_mb(f_mb)} MiB, cycle {c_ms} ms", r))
    rows.append((f"autotune -> {best_row[0]:.2f} MiB, {best_row[1]:.2f} ms (after tuning)", tuned))
    rows.extend(recheck)

    p = default
    print(f"## autotune_bench ({'quick' if args.quick else 'full'})\n")
    print(f"Workload: {len(WIDTHS) - 1}-layer MLP, {p['params']:,} parameters in {p['tensors']} gradient tensors, "
          f"batch {BATCH} per rank, {args.np} ranks (`dadtrun --gloo -np {args.np}`), SGD, 1 thread per rank. "
          f"Each fixed run: {args.warmup_steps} untimed steps, then the median of {args.timed_steps} timed steps.")
    print(f"Autotune: `{' '.join(f for f in tune_flags if f != csv_path).replace('--autotune-log-file', '--autotune-log-file F.csv')}`; "
          f"the worker ran {tuned['steps_before_timing']} steps (tuner settled by step {tuned['settled_at_step']}) "
          f"before timing {args.timed_steps} steps.\n")
    print("| setting | throughput (samples/s) | ratio to best grid point |")
    print("|---|---:|---:|")
    for name, r in rows:
        mark = " **(best grid)**" if r is grid[best_key] else ""
        print(f"| {name}{mark} | {r['samples_per_s']:.1f} | {r['samples_per_s'] / best_tp:.3f} |")
    pct = 100.0 * tuned["samples_per_s"] / best_tp
    n = len(samples)
    print(f"\nautotune reaches {pct:.1f}% of the best grid point after {n} samples")
    if summary:
        print(f"\nrank 0 summary: `{summary}`")
    print(f"\nCSV log: {csv_path}; total wall time {time.time() - t_start:.0f} s")

    # Plot
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 5))
    xs = [s[0] for s in samples]
    ys = [s[1] for s in samples]
    cs = [s[2] / 1e6 for s in samples]
    sc = ax.scatter(xs, ys, c=cs, cmap="viridis", s=60, edgecolors="k", linewidths=0.5, zorder=3,
                    label="autotune samples")
    for i, (x, y) in enumerate(zip(xs, ys)):
        ax.annotate(str(i), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, zorder=4)
    fig.colorbar(sc, ax=ax, label="score (MB allreduced / s)")
    gx = [k[0] for k in grid]
    gy = [k[1] for k in grid]
    ax.scatter(gx, gy, marker="+", c="grey", s=50, zorder=2, label="grid points")
    ax.scatter([best_key[0]], [best_key[1]], marker="s", s=180, facecolors="none", edgecolors="red",
               linewidths=2, zorder=5, label=f"best grid point ({best_tp:.0f} samples/s)")
    ax.scatter([best_row[0]], [best_row[1]], marker="*", s=260, c="orange", edgecolors="k", zorder=6,
               label=f"autotune chose ({tuned['samples_per_s']:.0f} samples/s, {pct:.0f}%)")
    ax.set_xlabel("fusion threshold (MiB)")
    ax.set_ylabel("cycle time (ms)")
    ax.set_xlim(-2, 66)
    ax.set_ylim(0, 102)
    ax.set_title(f"dadt autotune search: {n} samples, numbered in order")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot)), exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    print(f"plot: {args.plot}")


def main(argv=None):
    args = parse_args(argv)
    if args.warmup_steps is None:
        args.warmup_steps = 10 if args.quick else 15
    if args.timed_steps is None:
        args.timed_steps = 25 if args.quick else 40
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
