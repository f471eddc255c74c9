"""dadt autotune benchmark: default settings vs an exhaustive grid vs `dadtrun --autotune`, in one job.

    python examples/benchmarks/autotune_bench.py            # full run, a few minutes on 2 cores
    python examples/benchmarks/autotune_bench.py --quick    # smaller grid, fewer rounds
    python examples/benchmarks/autotune_bench.py --model many-tensor   # a bench_models.py model

Run as a plain script, it launches itself ONCE under `dadtrun --gloo -np 2 --autotune` and every
measurement happens inside that one job, so all settings share the same processes, memory and
machine load. The job trains a fixed synthetic workload (worker mode, --worker): an MLP of many
small Linear layers (see LAYERS; most gradients 64-256 KiB, so the per-collective cost and thus
fusion and cycle time matter), or with --model one of real_models.py's models (bench_models.py:
many-tensor, resnet50, resnet101, bert-base, comm) at --batch per rank, synthetic data, SGD
wrapped in dadt.torch.DistributedOptimizer,
torch.set_num_threads(1), fixed seeds. It does, in order:

  1. Tuning: trains until the autotuner has settled (rank 0 sees the `best` row of its CSV log;
     all ranks agree by allreduce). This costs (warm-up + max samples) x steps per sample steps.
  2. Grid rounds (`--rounds`): every setting below is applied in-process with
     dadt.set_fusion_params (rank 0's coordinator switches before its next negotiation round),
     trained for `--settle-steps` untimed steps, then timed over `--timed-steps` steps. The order
     of the settings is shuffled in each round (same seed on every rank). Settings:
       (a) default: 128 MiB, 1 ms (dadt's defaults, what a job without flags runs);
       (b) every point of the grid fusion threshold x cycle time;
       (c) autotune: the setting the tuner chose in step 1.
     The best grid point is the one with the highest median over the rounds.
  3. Head to head (`--head-to-head` rounds): the best grid point, autotune's choice and the
     default, measured the same way, back to back in a rotating order. Measurements next to each
     other in time share the machine's load, so their ratio is far steadier than a ratio of two
     medians taken minutes apart; and re-measuring the best grid point removes the upward bias of
     having picked it as the maximum of many noisy medians.

Throughput is global samples/s = ranks x batch / median step time over a measurement's timed
steps on rank 0 (the median, so that a step preempted by another process on a shared machine does
not count as the setting's fault). The headline,
"autotune reaches X% of the best grid point after N samples", is the median over the head-to-head
rounds of the per-round ratio autotune / best grid point. The grid table gives the medians of the
grid rounds. The plot (--plot) shows the tuner's samples on the fusion/cycle plane (log fusion
axis, as the tuner sees it), coloured by score, over the grid's medians, with the best grid point,
the chosen point and the default marked.
"""
import argparse
import csv
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import bench_models  # same folder
from allreduce_bench import find_dadtrun  # same folder: one launcher lookup for both benchmarks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1024 * 1024
# Hidden widths of the MLP: 48 Linear layers; weights of 64 KiB (128x128) to 256 KiB (256x256),
# biases below DADT_EAGER_THRESHOLD (sent with negotiation, unaffected by fusion).
LAYERS = [128] + [256, 128, 192, 256, 128, 256] * 8 + [10]
BATCH = 32
DEFAULT = (128.0, 1.0)  # dadt's defaults: fusion threshold MiB, cycle time ms
FULL_GRID = ([0, 0.25, 1, 4, 16, 64], [1, 3, 10, 30])
QUICK_GRID = ([0, 1, 16], [1, 10])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3x2 grid, 3 rounds")
    p.add_argument("--plot", default=os.path.join(REPO, "docs", "images", "autotune_search.png"),
                   help="where to save the search plot (default docs/images/autotune_search.png)")
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--model", choices=list(bench_models.MODELS), default=None,
                   help="train this bench_models.py model instead of the LAYERS MLP")
    p.add_argument("--batch", type=int, default=BATCH, help="batch per rank (default %d)" % BATCH)
    p.add_argument("--rounds", type=int, default=None, help="grid rounds (5; quick 2)")
    p.add_argument("--head-to-head", type=int, default=None,
                   help="head-to-head rounds of best grid point, autotune, default (24; quick 6)")
    p.add_argument("--settle-steps", type=int, default=2, help="untimed steps after each switch (2)")
    p.add_argument("--timed-steps", type=int, default=7, help="timed steps per setting and round (7)")
    p.add_argument("--autotune-warmup-samples", type=int, default=2)
    p.add_argument("--autotune-steps-per-sample", type=int, default=10)
    p.add_argument("--autotune-bayes-opt-max-samples", type=int, default=20)
    p.add_argument("--autotune-gaussian-process-noise", type=float, default=None,
                   help="passed on when given (dadt's default 0.8, a floor: the GP fits the noise)")
    p.add_argument("--log-dir", default=None, help="keep the CSV log and the result JSON here (default: temp)")
    p.add_argument("--json", default=None, help="also copy the worker's result JSON here")
    p.add_argument("--dadtrun", default=None, help="launcher (default: $DADTRUN, dadtrun on PATH, bazel-bin)")
    # worker mode (internal)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tune-log", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def grid_of(args):
    return QUICK_GRID if args.quick else FULL_GRID


def settings_to_compare(args):
    """(label, fusion MiB, cycle ms) of the default and every grid point; autotune's is added later."""
    fusions, cycles = grid_of(args)
    out = [("default", *DEFAULT)]
    out += [(f"grid {f:g} MiB {c:g} ms", float(f), float(c)) for f in fusions for c in cycles]
    return out


# ----------------------------------------------------------------------------------------------
# Worker: the one training job under dadtrun
# ----------------------------------------------------------------------------------------------

def read_tuner_log(path):
    """(samples [(MiB, ms, score)], best (MiB, ms, score) or None) from the tuner's CSV."""
    samples, best = [], None
    try:
        with open(path) as f:
            for rec in csv.DictReader(f):
                item = (float(rec["fusion_threshold_bytes"]) / MiB, float(rec["cycle_time_ms"]),
                        float(rec["score_bytes_per_sec"]))
                if rec["sample"] == "best":
                    best = item
                else:
                    samples.append(item)
    except (OSError, KeyError, ValueError):
        pass
    return samples, best


def worker(args):
    import torch
    import dadt.torch as dt

    torch.set_num_threads(1)
    dt.init()
    if args.model:
        model, make_batch, loss_of = bench_models.build(torch, args.model)
    else:  # the LAYERS MLP, with bench_models.py's MLP data and loss
        torch.manual_seed(1234)
        layers = []
        for i in range(len(LAYERS) - 1):
            layers.append(torch.nn.Linear(LAYERS[i], LAYERS[i + 1]))
            if i < len(LAYERS) - 2:
                layers.append(torch.nn.ReLU())
        model, make_batch, loss_of = bench_models._mlp_data(torch, torch.nn.Sequential(*layers),
                                                            LAYERS[0], LAYERS[-1])
    inputs, targets = make_batch(args.batch, torch.Generator().manual_seed(42 + dt.rank()))
    dt.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = dt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.001),
                                  named_parameters=model.named_parameters())

    def step():
        opt.zero_grad()
        loss_of(model(*inputs), targets).backward()
        opt.step()

    # 1. Tuning: train until rank 0 sees the tuner's `best` row; every rank agrees by allreduce.
    t0 = time.perf_counter()
    steps = 0
    while True:
        for _ in range(10):
            step()
            steps += 1
        settled = 1.0 if dt.rank() == 0 and read_tuner_log(args.tune_log)[1] is not None else 0.0
        if dt.allreduce(torch.tensor([settled]), name="bench.settled", op=dt.Sum).item() > 0:
            break
        if steps > 20000:
            raise RuntimeError("the autotuner did not settle within 20000 steps")
    tune_seconds = time.perf_counter() - t0
    chosen = torch.zeros(2, dtype=torch.float64)
    if dt.rank() == 0:
        _, best = read_tuner_log(args.tune_log)
        chosen = torch.tensor(best[:2], dtype=torch.float64)
    chosen = dt.broadcast(chosen, root_rank=0, name="bench.chosen")
    settings = settings_to_compare(args) + [("autotune", float(chosen[0]), float(chosen[1]))]

    def measure(f_mib, c_ms):
        """Applies a setting, trains settle steps, returns samples/s from the median timed step."""
        dt.set_fusion_params(fusion_threshold_bytes=int(round(f_mib * MiB)), cycle_time_ms=c_ms)
        for _ in range(args.settle_steps):
            step()
        times = []
        for _ in range(args.timed_steps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        return dt.size() * args.batch / statistics.median(times)

    # 2. Grid rounds: every setting once per round, in a fresh shuffled order per round.
    per_round = {label: [] for label, _, _ in settings}
    order_rng = random.Random(2024)
    for _ in range(args.rounds):
        order = list(settings)
        order_rng.shuffle(order)
        for label, f_mib, c_ms in order:
            per_round[label].append(measure(f_mib, c_ms))
    # 3. Head to head: the best grid point (rank 0's medians decide, for every rank), autotune's
    # choice and the default, back to back in a rotating order, many short times. Neighbours in
    # time share the machine's load, so their ratio is far steadier than that of two medians.
    grid_labels = [label for label, _, _ in settings if label.startswith("grid ")]
    pick = torch.tensor([max(range(len(grid_labels)),
                             key=lambda i: statistics.median(per_round[grid_labels[i]]))])
    pick = int(dt.broadcast(pick, root_rank=0, name="bench.best_grid").item())
    where = {label: (f, c) for label, f, c in settings}
    trio = [grid_labels[pick], "autotune", "default"]
    head = {label: [] for label in trio}
    for r in range(args.head_to_head):
        for label in trio[r % 3:] + trio[:r % 3]:
            head[label].append(measure(*where[label]))
    if dt.rank() == 0:
        out = {"settings": [[label, f, c] for label, f, c in settings], "per_round": per_round,
               "head_to_head": head, "best_grid": grid_labels[pick],
               "params": sum(p.numel() for p in model.parameters()),
               "tensors": sum(1 for _ in model.parameters()),
               "tensor_bytes": sorted({p.numel() * 4 for p in model.parameters()}),
               "tune_steps": steps, "tune_seconds": tune_seconds, "np": dt.size()}
        with open(args.result, "w") as f:
            json.dump(out, f)
    dt.shutdown()


# ----------------------------------------------------------------------------------------------
# Driver: one launch, then the report
# ----------------------------------------------------------------------------------------------

def summarize(result):
    """Grid-round medians, and autotune's ratio to the best grid point head to head."""
    med = {label: statistics.median(v) for label, v in result["per_round"].items()}
    best = result["best_grid"]
    head = result["head_to_head"]
    paired = [a / b for a, b in zip(head["autotune"], head[best])]
    paired_default = [a / b for a, b in zip(head["default"], head[best])]
    return {"median": med, "best_grid": best, "paired": paired, "ratio": statistics.median(paired),
            "default_ratio": statistics.median(paired_default),
            "head_median": {label: statistics.median(v) for label, v in head.items()}}


def tune_flags(args, csv_path):
    # The response cache is held at its default (on): the grid covers fusion x cycle only, so the
    # tuner searches the same two knobs.
    flags = ["--cache-capacity", "1024", "--autotune", "--autotune-log-file", csv_path,
             "--autotune-warmup-samples", str(args.autotune_warmup_samples),
             "--autotune-steps-per-sample", str(args.autotune_steps_per_sample),
             "--autotune-bayes-opt-max-samples", str(args.autotune_bayes_opt_max_samples)]
    if args.autotune_gaussian_process_noise is not None:
        flags += ["--autotune-gaussian-process-noise", str(args.autotune_gaussian_process_noise)]
    return flags


def plot(args, result, summary, samples, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def fx(mib):  # the tuner's own axis: log2(1 + bytes / 64 KiB)
        return math.log2(1 + mib * 16)

    fig, ax = plt.subplots(figsize=(8, 5.5))
    med = summary["median"]
    best_label = summary["best_grid"]
    where = {label: (f, c) for label, f, c in result["settings"]}
    grid = [(label, f, c) for label, f, c in result["settings"] if label.startswith("grid ")]
    gv = [med[label] / med[best_label] for label, _, _ in grid]
    bg = ax.scatter([fx(f) for _, f, _ in grid], [c for _, _, c in grid], c=gv, cmap="Greys", vmin=0.5,
                    vmax=1.0, marker="s", s=520, alpha=0.55, zorder=1)
    for (label, f, c), v in zip(grid, gv):
        ax.annotate(f"{v:.2f}", (fx(f), c), textcoords="offset points", xytext=(0, -16), ha="center",
                    fontsize=7, color="dimgrey", zorder=2)
    fig.colorbar(bg, ax=ax, label="grid point: median throughput / best grid point", pad=0.01)
    ax.scatter([fx(f) for f, _, _ in samples], [c for _, c, _ in samples], c=[v for _, _, v in samples],
               cmap="viridis", s=55, edgecolors="k", linewidths=0.5, zorder=3)
    for i, (f, c, _) in enumerate(samples):
        ax.annotate(str(i), (fx(f), c), textcoords="offset points", xytext=(4, 4), fontsize=7, zorder=4)
    bf, bc = where[best_label]
    ax.scatter([fx(bf)], [bc], marker="s", s=300, facecolors="none", edgecolors="red", linewidths=2,
               zorder=5, label=f"best grid point ({bf:g} MiB, {bc:g} ms)")
    cf, cc = where["autotune"]
    ax.scatter([fx(cf)], [cc], marker="*", s=300, c="orange", edgecolors="k", zorder=6,
               label=f"autotune chose ({cf:.2f} MiB, {cc:.2f} ms): {100 * summary['ratio']:.1f}% of best grid "
                     "point head to head")
    ax.scatter([fx(DEFAULT[0])], [DEFAULT[1]], marker="D", s=60, facecolors="none", edgecolors="blue",
               zorder=5, label=f"default (128 MiB, 1 ms): {100 * summary['default_ratio']:.1f}% head to head")
    ticks = [0, 0.25, 1, 4, 16, 64, 128]
    ax.set_xticks([fx(t) for t in ticks])
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.set_xlim(-0.8, fx(128) + 0.8)
    ax.set_ylim(0.7, 140)
    ax.set_yscale("log")
    ax.set_yticks([1, 3, 10, 30, 100])
    ax.set_yticklabels(["1", "3", "10", "30", "100"])
    ax.set_xlabel("fusion threshold (MiB, log scale as the tuner sees it)")
    ax.set_ylabel("cycle time (ms, log scale)")
    ax.set_title(f"dadt autotune search: {len(samples)} samples in order (colour: score, "
                 "yellow = best); grey: grid", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


def driver(args):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("autotune_bench: dadtrun not found (use --dadtrun or install dadt)")
    tmp = args.log_dir or tempfile.mkdtemp(prefix="autotune_bench.")
    os.makedirs(tmp, exist_ok=True)
    csv_path = os.path.join(tmp, "autotune.csv")
    result_path = os.path.join(tmp, "result.json")
    for p in (csv_path, result_path):
        if os.path.exists(p):
            os.remove(p)
    flags = tune_flags(args, csv_path)
    cmd = [dadtrun, "--gloo", "-np", str(args.np), *flags, sys.executable, os.path.abspath(__file__),
           "--worker", "--result", result_path, "--tune-log", csv_path, "--rounds", str(args.rounds),
           "--head-to-head", str(args.head_to_head), "--settle-steps", str(args.settle_steps), "--timed-steps", str(args.timed_steps),
           "--batch", str(args.batch)] + (["--model", args.model] if args.model else [])
    if args.quick:
        cmd.append("--quick")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DADT_")}  # only our flags count
    n_settings = len(settings_to_compare(args)) + 1
    print(f"autotune_bench: 1 job: tuning, {args.rounds} grid rounds x {n_settings} settings, "
          f"{args.head_to_head} head-to-head rounds; logs in {tmp}",
          file=sys.stderr, flush=True)
    t_start = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0 or not os.path.exists(result_path):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        sys.exit(f"autotune_bench: the job failed (rc {proc.returncode}): {' '.join(cmd)}")
    wall = time.time() - t_start
    with open(result_path) as f:
        result = json.load(f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    samples, best_row = read_tuner_log(csv_path)
    line = next((ln.strip() for ln in proc.stderr.splitlines() if "autotune: chose" in ln), "")
    line = line[line.find("autotune: chose"):] if line else ""
    summary = summarize(result)
    med, best, hm = summary["median"], summary["best_grid"], summary["head_median"]
    where = {label: (f, c) for label, f, c in result["settings"]}

    print(f"## autotune_bench ({'quick' if args.quick else 'full'})\n")
    sizes = result["tensor_bytes"]
    what = f"bench_models.py's {args.model}" if args.model else f"{len(LAYERS) - 1}-layer MLP"
    print(f"Workload: {what}, {result['params']:,} parameters in {result['tensors']} "
          f"gradient tensors ({sizes[0]:,} B .. {sizes[-1] // 1024} KiB), batch {args.batch} per rank, "
          f"`dadtrun --gloo -np {result['np']}`, SGD, 1 thread per rank, one job (wall time {wall:.0f} s).")
    shown = ' '.join(f for f in flags if f != csv_path).replace('--autotune-log-file', '--autotune-log-file F.csv')
    print(f"Tuning: `{shown}`: settled after {result['tune_steps']} steps ({result['tune_seconds']:.0f} s). "
          f"Then every setting switched in-process (`dadt.set_fusion_params`), {args.settle_steps} untimed + "
          f"{args.timed_steps} timed steps per measurement (samples/s from the median step time): {args.rounds} grid rounds (shuffled order), "
          f"then {args.head_to_head} head-to-head rounds of best grid point, autotune and default "
          f"(rotating order).\n")
    print(f"Grid rounds (median over {args.rounds} rounds):\n")
    print("| setting | fusion threshold | cycle time | samples/s (median) | ratio to best grid point |")
    print("|---|---:|---:|---:|---:|")
    for label, f, c in result["settings"]:
        name = {"default": "default (no flags)", "autotune": "**autotune** (chosen)"}.get(label, "grid")
        if label == best:
            name = "grid **(best grid point)**"
        print(f"| {name} | {f:.2f} MiB | {c:.2f} ms | {med[label]:.1f} | {med[label] / med[best]:.3f} |")
    bf, bc = where[best]
    cf, cc = where["autotune"]
    print(f"\nHead to head (median over {args.head_to_head} rounds; ratio = median of the per-round ratios):\n")
    print("| setting | samples/s (median) | ratio to best grid point |")
    print("|---|---:|---:|")
    print(f"| best grid point ({bf:g} MiB, {bc:g} ms) | {hm[best]:.1f} | 1.000 |")
    print(f"| **autotune** ({cf:.2f} MiB, {cc:.2f} ms) | {hm['autotune']:.1f} | {summary['ratio']:.3f} |")
    print(f"| default (128 MiB, 1 ms) | {hm['default']:.1f} | {summary['default_ratio']:.3f} |")
    print(f"\nper-round ratios autotune / best grid point: {', '.join(f'{r:.2f}' for r in summary['paired'])}")
    print(f"\nautotune reaches {100 * summary['ratio']:.1f}% of the best grid point after {len(samples)} samples")
    if line:
        print(f"\nrank 0's summary: `{line}`")
    print(f"\nCSV log: {csv_path}")
    plot(args, result, summary, samples, args.plot)
    print(f"plot: {args.plot}")


def main(argv=None):
    args = parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 if args.quick else 5
    if args.head_to_head is None:
        args.head_to_head = 6 if args.quick else 24
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
