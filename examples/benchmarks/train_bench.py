"""Training throughput of DistributedOptimizer's modes (sync, async, dear) and of torch's
DistributedDataParallel (gloo) on the same model and synthetic data.

Driver (a plain script): launches itself under dadtrun, round after round, and prints one table.

    python examples/benchmarks/train_bench.py --np 2                       # all modes + DDP
    python examples/benchmarks/train_bench.py --np 2 --model cnn --layers 6 --width 64
    python examples/benchmarks/train_bench.py --np 2 --dadtrun-args="-H a:1,b:1"   # two hosts
    sudo examples/benchmarks/two_host_bench.sh     # two namespace hosts, 1 Gbit/s tbf link

Each round launches `dadtrun -np 1` (plain torch, no wrapper: the one-rank baseline) and
`dadtrun -np N` (every mode in the same job, each with its own model, timed in chunks of --steps
steps, the modes interleaved chunk by chunk in a rotated order). A chunk is timed in steady state,
as in a long training run: one untimed step first fills the pipeline (async's allreduce of it is in
flight when the timed steps begin), and the flush() after the timed steps, which a run does once
at its end, is not timed; so each mode is timed over exactly --steps step periods. The table
holds the median of
global samples/s over all chunks, the median ratio to sync of chunks run back to back, and the
scaling efficiency = samples/s at N ranks / (N x samples/s of one rank).

Worker (under dadtrun; what the driver launches):

    dadtrun --gloo -np 2 python examples/benchmarks/train_bench.py --mode async
    dadtrun --gloo -np 2 python examples/benchmarks/train_bench.py --modes sync,dear,ddp

DDP is started through the torchrun variables that dadtrun sets on every rank (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), with torch.distributed's gloo backend and bucket_cap_mb equal to the
bucket size of the dadt modes. The bucket size is the fusion threshold (--fusion-threshold-mb,
passed to dadtrun).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from allreduce_bench import find_dadtrun, worker_environment  # same folder

MODES = ["sync", "async", "dear", "ddp"]
MiB = 1024 * 1024


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--layers", type=int, default=10, help="hidden layers (Linear or Conv2d), default 10")
    p.add_argument("--width", type=int, default=1024,
                   help="MLP hidden width / CNN channels (default 1024: a ~10.5M-parameter MLP)")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--steps", type=int, default=5, help="timed steps per chunk")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--fusion-threshold-mb", type=float, default=None,
                   help="bucket size of every mode (dadt fusion threshold, DDP bucket_cap_mb); driver "
                        "default 4; worker default DADT_FUSION_THRESHOLD (dadtrun --fusion-threshold-mb)")
    p.add_argument("--mode", choices=MODES + ["local"], help="worker: one mode")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated modes (default all)")
    p.add_argument("--rounds", type=int, default=3, help="driver: launches per rank count")
    p.add_argument("--chunks", type=int, default=6, help="timed chunks per mode and launch")
    p.add_argument("--np", type=int, default=2, help="driver: ranks")
    p.add_argument("--dadtrun", default=None, help="launcher (default: $DADTRUN, PATH, bazel-bin)")
    p.add_argument("--dadtrun-args", default="", help="extra launcher arguments, e.g. '-H a:1,b:1'")
    p.add_argument("--json", metavar="FILE", help="driver: also write every sample as JSON")
    p.add_argument("--link-mb-per-s", type=float, default=None,
                   help="driver: the measured link rate (MB/s); the header then compares one step's "
                        "computation with one ring allreduce of the gradients at that rate")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.mode_list = [args.mode] if args.mode else [m for m in args.modes.split(",") if m]
    for m in args.mode_list:
        if m not in MODES + ["local"]:
            p.error("unknown mode %r (choose from %s)" % (m, ", ".join(MODES + ["local"])))
    return args


# ----------------------------------------------------------------------------------------------
# Worker
# ----------------------------------------------------------------------------------------------
def build_model(torch, args):
    torch.manual_seed(1234)
    nn = torch.nn
    if args.model == "mlp":
        dims = [args.width] * (args.layers + 1)
        layers = []
        for a, b in zip(dims, dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(args.width, 10)), (args.width,)
    layers, channels = [], 3
    for _ in range(args.layers):
        layers += [nn.Conv2d(channels, args.width, 3, padding=1), nn.ReLU()]
        channels = args.width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)), (3, 32, 32)


def make_mode(torch, dadt, mode, args):
    """A function that runs n training steps of `mode` (its own model and optimizer)."""
    import torch.nn.functional as F
    from dadt.torch import training_modes
    model, shape = build_model(torch, args)
    bucket_bytes = training_modes.default_bucket_bytes()
    if args.fusion_threshold_mb is not None:
        bucket_bytes = int(args.fusion_threshold_mb * MiB)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, bucket_cap_mb=bucket_bytes / MiB)
        opt = sgd
    elif mode == "local":
        opt = sgd
    else:
        opt = dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), mode=mode,
                                        model=model, bucket_bytes=bucket_bytes)
        dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(dadt.rank())
    x = torch.randn(args.batch_size, *shape, generator=g)
    y = torch.randint(0, 10, (args.batch_size,), generator=g)

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    def drain():
        if hasattr(opt, "flush"):
            opt.flush()  # async: the last average; dear: the deferred updates
    return steps, drain


def worker(args):
    """Every mode in this job, each with its own model, timed in chunks of --steps steps with the
    modes interleaved chunk by chunk (rotated order), so that load changes hit all modes alike."""
    import torch
    import dadt.torch as dadt
    torch.set_num_threads(args.threads)
    dadt.init()
    if "ddp" in args.mode_list:
        import torch.distributed as dist
        dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from dadtrun
    runners = {m: make_mode(torch, dadt, m, args) for m in args.mode_list}
    for steps, drain in runners.values():
        steps(args.warmup_steps)
        drain()
    samples = {m: [] for m in args.mode_list}
    n = len(args.mode_list)
    for r in range(args.chunks):
        for i in range(n):
            mode = args.mode_list[(i + r) % n]  # rotate the order every chunk
            steps, drain = runners[mode]
            dadt.barrier()
            # Steady state, as in a long training run: one untimed step fills the pipeline (async:
            # its allreduce is in flight when the timed steps begin, and the first timed step waits
            # for it), the timed steps follow with nothing in between, and the drain (flush) that a
            # run does once at its end is untimed, so each mode is timed over exactly --steps step
            # periods. Draining before the barrier keeps one mode's traffic out of the next's chunk.
            steps(1)
            start = time.perf_counter()
            steps(args.steps)
            elapsed = time.perf_counter() - start
            drain()
            samples[mode].append(dadt.size() * args.batch_size * args.steps / elapsed)
    if dadt.rank() == 0:
        print("RESULT " + json.dumps({"size": dadt.size(), "samples_per_sec": samples}), flush=True)
        if not args.worker:  # run by hand: a short table of this job alone
            for mode, v in samples.items():
                print("%-6s %10.1f samples/s (median of %d)" % (mode, statistics.median(v), len(v)))
    if "ddp" in args.mode_list:
        torch.distributed.destroy_process_group()
    dadt.shutdown()


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def launch(args, np, modes):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("train_bench: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    cmd = [dadtrun, "--gloo", "-np", str(np), "--fusion-threshold-mb", str(args.fusion_threshold_mb),
           *args.dadtrun_args.split(), sys.executable, os.path.abspath(__file__), "--worker",
           "--modes", ",".join(modes), "--chunks", str(args.chunks), "--model", args.model,
           "--layers", str(args.layers), "--width", str(args.width), "--batch-size", str(args.batch_size),
           "--warmup-steps", str(args.warmup_steps), "--steps", str(args.steps),
           "--threads", str(args.threads), "--fusion-threshold-mb", str(args.fusion_threshold_mb)]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=worker_environment(), stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit("train_bench: the job failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))
    for line in proc.stdout.splitlines():
        m = re.match(r"^(?:\[0\]<stdout>:)?RESULT (.*)$", line)
        if m:
            return json.loads(m.group(1))["samples_per_sec"]
    sys.exit("train_bench: no RESULT line from rank 0:\n" + proc.stdout[-3000:])


def driver(args):
    import torch
    if args.fusion_threshold_mb is None:
        args.fusion_threshold_mb = 4.0
    model, _ = build_model(torch, args)
    params = sum(p.numel() for p in model.parameters())
    modes = [m for m in args.mode_list if m != "local"]
    rotated = lambda r: modes[r % len(modes):] + modes[:r % len(modes)]  # noqa: E731
    one, many = [], {m: [] for m in modes}
    for r in range(args.rounds):
        print("round %d/%d" % (r + 1, args.rounds), file=sys.stderr, flush=True)
        one += launch(args, 1, ["local"])["local"]
        for mode, v in launch(args, args.np, rotated(r)).items():
            many[mode] += v
    base = statistics.median(one)
    sync = statistics.median(many["sync"]) if many.get("sync") else None
    print("model: %s, %d layers of width %d, %.2fM parameters (%.1f MB of fp32 gradients); batch %d "
          "per rank; bucket %.1f MiB; %d threads per rank" % (args.model, args.layers, args.width,
                                                          params / 1e6, params * 4 / 1e6, args.batch_size,
                                                          args.fusion_threshold_mb, args.threads))
    print("%d launches x %d chunks of %d timed steps per mode, modes interleaved chunk by chunk; medians; "
          "'vs sync' is the median ratio of chunks run back to back; one rank (plain torch): %.1f samples/s\n"
          % (args.rounds, args.chunks, args.steps, base))
    if args.link_mb_per_s:
        # A ring allreduce sends 2 (n-1)/n of the gradients' bytes over each rank's link.
        comm = 2 * (args.np - 1) / args.np * params * 4 / (args.link_mb_per_s * 1e6)
        print("one step's computation (one rank, plain torch): %.0f ms; one ring allreduce of the "
              "gradients at %.1f MB/s: %.0f ms\n" % (1000 * args.batch_size / base, args.link_mb_per_s,
                                                    1000 * comm))
    print("| mode | ranks | samples/s (median) | min .. max | vs sync | scaling efficiency |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for mode in modes:
        med = statistics.median(many[mode])
        # the median of the ratios of chunks run back to back in the same job
        ratio = "%.2fx" % statistics.median(a / b for a, b in zip(many[mode], many["sync"])) if sync else "-"
        print("| %s | %d | %.1f | %.1f .. %.1f | %s | %.0f%% |" % (
            mode, args.np, med, min(many[mode]), max(many[mode]), ratio, 100 * med / (args.np * base)))
    if sync and many.get("ddp"):
        print("\nsync vs ddp: %.2fx (median of the ratios of chunks run back to back)"
              % statistics.median(a / b for a, b in zip(many["sync"], many["ddp"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"one_rank": one, "ranks": args.np, "samples_per_sec": many, "args": vars(args)}, f,
                      indent=1, default=str)


def main():
    args = parse_args()
    under_launcher = "DADT_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ
    if args.worker or under_launcher:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
