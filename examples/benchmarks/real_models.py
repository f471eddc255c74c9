"""Training throughput of dadt against torch DDP and Horovod on real models (ResNet-50, ResNet-101,
BERT-Base pre-training and an MLP of many small tensors), every contender at its defaults.

    python3 examples/benchmarks/real_models.py --np 2                            # one host, CPU
    python3 examples/benchmarks/real_models.py --np 2 --horovodrun /opt/horovod-peer/bin/horovodrun
    python3 examples/benchmarks/real_models.py --np 2 --hosts h1:1,h2:1 --network-interface dadt0 \\
        --link-mb-per-s 117 --horovodrun /opt/horovod-peer/bin/horovodrun --json run.json
    python3 examples/benchmarks/real_models.py --from-json run.json    # the tables again, nothing launched
    python3 examples/benchmarks/real_models.py --np 2 --models many-tensor,resnet50 --rounds 1 \\
        --steps 2 --chunks 2 --warmup-steps 1 --image-size 64            # smoke run

The models are bench_models.py's (written from the published shapes, synthetic data):
  resnet50, resnet101  torchvision's ImageNet ResNets v1.5 (25,557,032 and 44,549,160 parameters in
                       161 and 314 tensors), 3 x 224 x 224 images (--image-size shrinks them for CPU
                       time; the table's header says so), 1000 classes; batch 2 per rank by default;
  bert-base            BERT-Base pre-training (110M parameters in 206 tensors, the masked-LM decoder
                       tied to the word embedding), --seq-len 128, masked-LM loss on 15% of the
                       positions plus the next-sentence loss; batch 2 per rank;
  many-tensor          80 x (Linear(256, 256) + ReLU) + Linear(256, 10): 162 tensors, 5.3M
                       parameters; batch 32 per rank;
  comm                 peers.py's comm MLP (4 x 1536, 30 MB of gradients), batch 64; not in the
                       default --models.
--batch changes the batch per rank (one number for every model, or e.g. resnet50=4,bert-base=1).

Contenders, each at its defaults as users run it, SGD (lr 1e-3, momentum 0.9) for all:
  ddp        DistributedDataParallel(model), gloo, no bucket argument (bucket_cap_mb 25), under
             dadtrun (which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT);
  ddp-tuned  the same with bucket_cap_mb = --ddp-tuned-bucket-mb (default 4): the table labels it
             tuned;
  horovod    horovod.torch.DistributedOptimizer under `horovodrun --gloo` (only with --horovodrun),
             HOROVOD_FUSION_THRESHOLD and HOROVOD_CYCLE_TIME unset (Horovod's defaults);
  sync, async, dear  dadt.torch.DistributedOptimizer(mode=...) under `dadtrun --gloo`, with no
             --fusion-threshold-mb and no fusion, cycle-time or autotune variable (dadt's defaults).
The fusion, cycle-time and autotune variables of both runtimes (DADT_FUSION_THRESHOLD,
DADT_CYCLE_TIME, DADT_AUTOTUNE and their HOROVOD_ names) are taken out of every launch's
environment; the header names any other DADT_*/HOROVOD_* variable that is passed through.
BatchNorm's running statistics: DDP broadcasts the model's buffers from rank 0 before every forward
(broadcast_buffers=True, its default); Horovod and dadt leave each rank's own statistics (buffers
are broadcast once at the start, with the parameters). The defaults are kept: each runs as its
users run it, and ResNet's DDP rows carry that broadcast.

Every contender runs in its own launch; one round launches each contender once per model, in an
order rotated from round to round (as peers.py), so that a slow spell of the machine hits every
contender alike. A launch warms up, then times --chunks consecutive chunks of --steps steps; its
figure is the median samples/s of its chunks. The table gives, per model and contender, the median
over rounds, the spread (min .. max), the step time, and the median over rounds of the ratio to
ddp's and horovod's launches of the same round. Under each model's header, from the dadt launches'
own measurements (peers.py's phase_times and whole_allreduce_s): F and B (forward and backward of
one step on one rank), W (one allreduce of all the gradients through dadt), the synchronous floor
(F, then the wire's last byte, a gradient leaving once backward has made it), dear's serial chain,
and how far a synchronous step could lead DDP and Horovod (their step over that floor: a 1.05x or
1.2x lead is reachable only where this says more). 'bound vs sync' is sync's measured step over
each dadt mode's overlap bound (peers.py's doc string explains the bounds). Those bounds take the
wire as free to overlap; where a rank has one core, the CPU W costs it (whole_allreduce's
"allreduce_cpu_s": the ring's reductions and copies, the sockets' system time) comes out of the
core that runs F and B, so no step of any mode is shorter than F + B + that, the CPU floor. Each
dadt launch also measures that floor whole (peers.py's overlapped_step): C, a step's computation
alone with the optimizer's update (SGD with momentum, which F and B leave out), and P, the same
computation while one allreduce of all the gradients is in flight in dadt's background thread,
which adds what the two threads cost each other on one core (caches, memory traffic, switches).
No step of any mode, however it overlaps, is shorter than P: the overlap floor. The header gives
both floors and the peers' leads over the higher one; 'machine bound vs sync' is sync's step over
each mode's bound raised to that floor (with 2 ranks on this machine's 2 cores, hosts in
namespaces too, it applies).
"""
import argparse
import json
import os
import statistics
import sys

from allreduce_bench import find_dadtrun, worker_environment  # same folder
from peers import (comm_end, overlapped_step, phase_times, ratio, report_result, run_launch, spread,
                   timed_chunks, whole_allreduce)
import bench_models

CONTENDERS = ("ddp", "ddp-tuned", "horovod", "sync", "async", "dear")
DADT_MODES = ("sync", "async", "dear")
PEERS = ("ddp", "ddp-tuned", "horovod")
DEFAULT_MODELS = ("resnet50", "resnet101", "bert-base", "many-tensor")
# Knobs of either runtime that would move a contender off its defaults (the runtime reads the
# HOROVOD_ names as aliases of the DADT_ ones).
TUNING_VARIABLES = ("DADT_FUSION_THRESHOLD", "DADT_CYCLE_TIME", "DADT_AUTOTUNE",
                    "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_AUTOTUNE")
LEAD_NAME = {"ddp": "DDP", "ddp-tuned": "DDP tuned", "horovod": "Horovod"}
DESCRIPTION = {
    "resnet50": "ResNet-50 v1.5",
    "resnet101": "ResNet-101 v1.5",
    "bert-base": "BERT-Base pre-training (MLM + NSP)",
    "many-tensor": "80 x Linear(256, 256) + Linear(256, 10) MLP",
    "comm": "peers.py's comm MLP, 4 x 1536",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--hosts", default=None, help="host list for both launchers, e.g. a:1,b:1 (default: this host)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="comma-separated models (default %s; also: comm)" % ",".join(DEFAULT_MODELS))
    p.add_argument("--contenders", default=None,
                   help="comma-separated subset of %s (default all; horovod only with --horovodrun)"
                   % ",".join(CONTENDERS))
    p.add_argument("--batch", default=None,
                   help="batch per rank: one number for every model, or name=N,... (defaults: %s)"
                   % ", ".join("%s %d" % kv for kv in bench_models.DEFAULT_BATCH.items()))
    p.add_argument("--image-size", type=int, default=224, help="ResNet images are 3 x S x S (default 224)")
    p.add_argument("--seq-len", type=int, default=128, help="BERT's sequence length (default 128)")
    p.add_argument("--rounds", type=int, default=3, help="launches per contender and model (default 3)")
    p.add_argument("--chunks", type=int, default=3, help="timed chunks per launch (default 3)")
    p.add_argument("--steps", type=int, default=3, help="steps per chunk (default 3)")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--phase-reps", type=int, default=3,
                   help="timed computation-only steps for F and B in each dadt launch (default 3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--ddp-tuned-bucket-mb", type=float, default=4.0,
                   help="ddp-tuned's bucket_cap_mb (default 4; ddp keeps DDP's 25)")
    p.add_argument("--dadtrun", default=None, help="dadt's launcher (default: $DADTRUN, PATH, bazel-bin)")
    p.add_argument("--horovodrun", default=None, help="Horovod's launcher; its python runs the Horovod rows")
    p.add_argument("--dadtrun-args", default="", help="extra dadtrun arguments (every launch under dadtrun)")
    p.add_argument("--network-interface", default=None,
                   help="the interface between the hosts, for both launchers (e.g. dadt0 on the namespace hosts)")
    p.add_argument("--link-mb-per-s", type=float, default=None, help="the link's measured rate, for the header")
    p.add_argument("--json", metavar="FILE", help="also write every launch's figures as JSON")
    p.add_argument("--from-json", metavar="FILE", help="print the tables of a run saved with --json; launch nothing")
    # worker
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--model", choices=list(bench_models.MODELS), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def batch_of(args, model):
    """The batch per rank of `model`: --batch (N, or name=N,...) or bench_models' default."""
    if args.batch:
        if "=" not in args.batch:
            return int(args.batch)
        for item in args.batch.split(","):
            name, _, n = item.partition("=")
            if name.strip() == model:
                return int(n)
    return bench_models.DEFAULT_BATCH[model]


def model_options(args):
    return {"image_size": args.image_size, "seq_len": args.seq_len}


# ----------------------------------------------------------------------------------------------
# Worker: one contender, one model
# ----------------------------------------------------------------------------------------------
def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    kind = args.worker
    model, make_batch, loss_fn = bench_models.build(torch, args.model, **model_options(args))
    model.train()
    n_params, n_tensors = bench_models.counts(model)
    batch = batch_of(args, args.model)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    extra = {"params": n_params, "tensors": n_tensors, "batch": batch}
    if kind == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank, size, barrier = hvd.rank(), hvd.size(), hvd.barrier
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
        drain, finish = (lambda: None), hvd.shutdown
    elif kind.startswith("ddp"):
        import torch.distributed as dist
        dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from dadtrun
        rank, size, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
        from torch.nn.parallel import DistributedDataParallel
        if kind == "ddp-tuned":
            model = DistributedDataParallel(model, bucket_cap_mb=args.ddp_tuned_bucket_mb)
        else:
            model = DistributedDataParallel(model)  # DDP's defaults: 25 MB buckets, buffers broadcast
        opt, drain, finish = sgd, (lambda: None), dist.destroy_process_group
    else:
        import dadt.torch as dadt
        dadt.init()
        rank, size, barrier = dadt.rank(), dadt.size(), dadt.barrier
        inputs, targets = make_batch(batch, torch.Generator().manual_seed(rank))
        loss_of = lambda m: loss_fn(m(*inputs), targets)  # noqa: E731
        extra.update(phase_times(torch, model, None, None, reps=args.phase_reps, loss_of=loss_of))
        extra.update(whole_allreduce(torch, dadt, model, name="real_models.W"))
        extra.update(overlapped_step(torch, dadt, model, loss_of, reps=args.phase_reps, name="real_models.P"))
        dadt.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), mode=kind, model=model)
        drain = getattr(opt, "flush", lambda: None)
        finish = dadt.shutdown
    inputs, targets = make_batch(batch, torch.Generator().manual_seed(rank))

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            loss_fn(model(*inputs), targets).backward()
            opt.step()

    report_result(rank, size, extra, timed_chunks(args, steps, drain, barrier, size * batch))
    finish()
    if kind.startswith("ddp"):
        # As in peers.py: freeing DDP's reducer at exit can deadlock on torch 2.13. The results are
        # out; leave at once.
        sys.stdout.flush()
        os._exit(0)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def hostlist(args):
    return args.hosts or "localhost:%d" % args.np


def default_environment(env):
    """env without the fusion, cycle-time and autotune knobs of either runtime."""
    return {k: v for k, v in env.items() if k not in TUNING_VARIABLES}


def command(args, kind, model):
    me = os.path.abspath(__file__)
    tail = ["--worker", kind, "--model", model, "--chunks", str(args.chunks), "--steps", str(args.steps),
            "--warmup-steps", str(args.warmup_steps), "--threads", str(args.threads),
            "--phase-reps", str(args.phase_reps), "--image-size", str(args.image_size),
            "--seq-len", str(args.seq_len), "--batch", str(batch_of(args, model)),
            "--ddp-tuned-bucket-mb", str(args.ddp_tuned_bucket_mb)]
    if kind == "horovod":
        hvd_python = os.path.join(os.path.dirname(args.horovodrun), "python3")
        nic = ["--network-interface", args.network_interface] if args.network_interface else []
        return ([args.horovodrun, "--gloo", "-np", str(args.np), "-H", hostlist(args), *nic, hvd_python, me]
                + tail, default_environment(os.environ))
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("real_models: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    hosts = ["-H", args.hosts] if args.hosts else []
    hosts += ["--network-interface", args.network_interface] if args.network_interface else []
    cmd = [dadtrun, "--gloo", "-np", str(args.np), *hosts, *args.dadtrun_args.split(), sys.executable, me] + tail
    return cmd, default_environment(worker_environment())


def launch(args, kind, model):
    cmd, env = command(args, kind, model)
    return run_launch(cmd, env, "real_models", "%s on %s" % (kind, model))


def contenders(args):
    if args.contenders:
        chosen = [c for c in args.contenders.split(",") if c]
    else:
        chosen = [c for c in CONTENDERS if c != "horovod" or args.horovodrun]
    for c in chosen:
        if c not in CONTENDERS:
            sys.exit("real_models: unknown contender %r (choose from %s)" % (c, ", ".join(CONTENDERS)))
        if c == "horovod" and not args.horovodrun:
            sys.exit("real_models: horovod needs --horovodrun (e.g. /opt/horovod-peer/bin/horovodrun)")
    return sorted(set(chosen), key=CONTENDERS.index)


def label(args, c):
    if c == "ddp":
        return "ddp (bucket_cap_mb 25, default)"
    if c == "ddp-tuned":
        return "ddp-tuned (tuned: bucket_cap_mb %g)" % args.ddp_tuned_bucket_mb
    return c


def model_header(args, model, any_run):
    n, t, batch = any_run["params"], any_run["tensors"], any_run["batch"]
    what = DESCRIPTION.get(model, model)
    if model.startswith("resnet"):
        what += ", 3 x %d x %d images%s" % (args.image_size, args.image_size,
                                              "" if args.image_size == 224 else
                                              " (--image-size %d; ImageNet's are 224)" % args.image_size)
    elif model == "bert-base":
        what += ", sequence length %d" % args.seq_len
    return ("### %s: %s, batch %d per rank, %s parameters in %d tensors (%.1f MB of fp32 gradients), %d ranks"
            % (model, what, batch, "{:,}".format(n), t, n * 4 / 1e6, args.np))


def report(args, model, names, runs):
    """runs: round -> contender -> the launch's result. Prints the model's header and table;
    returns (median samples/s per contender, overlap bound per dadt mode, the synchronous floor)."""
    med = statistics.median
    any_run = runs[0][names[0]]
    batch = any_run["batch"]
    per = {c: [med(r[c]["samples_per_sec"]) for r in runs] for c in names}
    step = {c: args.np * batch / med(per[c]) for c in names}  # one step, in seconds
    dadt_runs = [r[m] for r in runs for m in DADT_MODES if m in r]
    print("\n" + model_header(args, model, any_run))
    bounds, machine_bounds, floor = {}, {}, None
    if dadt_runs:
        f, b, w = (med(d[k] for d in dadt_runs) for k in ("forward_s", "backward_s", "allreduce_s"))
        print("F (forward) %.1f ms, B (backward) %.1f ms, W (one allreduce of all gradients) %.1f ms"
              % (1e3 * f, 1e3 * b, 1e3 * w))
        if args.link_mb_per_s:
            wire = 2 * (args.np - 1) / args.np * any_run["params"] * 4 / (args.link_mb_per_s * 1e6)
            print("a ring allreduce of the gradients at %.0f MB/s takes %.1f ms on the wire"
                  % (args.link_mb_per_s, 1e3 * wire))
        floor = f + max(b, comm_end(dadt_runs, w))
        chain = med(d["dear_chain_s"] for d in dadt_runs)
        print("no synchronous step is shorter than %.1f ms (F, then the wire's last byte: a gradient "
              "cannot leave before backward makes it); dear's chain between a step's last all-gather "
              "and the next step's first reduce-scatter: %.1f ms" % (1e3 * floor, 1e3 * chain))
        # Where a rank has one core (ranks >= cores, as with 2 ranks on this 2-core machine, hosts
        # in namespaces included), the CPU the allreduce needs (the ring's reductions and copies,
        # the sockets' system time) comes out of the same core as F and B: no overlap hides it.
        wc = med_of(dadt_runs, "allreduce_cpu_s")
        if wc is not None:
            print("W costs each rank %.1f ms of CPU (every thread of the process); if a rank has one core, "
                  "compute and communication share it and no step is shorter than F + B + that: "
                  "%.1f ms (the CPU floor)" % (1e3 * wc, 1e3 * (f + b + wc)))
        # P measures that floor whole: the step's computation, the optimizer's update included,
        # with one allreduce of all the gradients in flight beside it.
        c_alone, p = med_of(dadt_runs, "compute_s"), med_of(dadt_runs, "overlap_step_s")
        if p is not None:
            print("C (forward, backward and the optimizer's update, alone) %.1f ms; P (the same while one "
                  "allreduce of all gradients is in flight) %.1f ms: no step of any mode, however it overlaps, "
                  "is shorter here (the overlap floor)" % (1e3 * c_alone, 1e3 * p))
        # The higher of the two, for every mode; a synchronous step is also held to its wire floor.
        known = [x for x in (None if wc is None else f + b + wc, p) if x is not None]
        overlap_floor = max(known) if known else None
        machine_floor = max(floor, overlap_floor) if known else None
        if "sync" in per:
            s_sync = step["sync"]
            dear_denominator = max(max(f, w / 2) + max(b, w / 2), w + chain)
            bounds = {"sync": s_sync / floor, "async": s_sync / max(f + b, w), "dear": s_sync / dear_denominator}
            if machine_floor is not None:
                machine_bounds = {"sync": s_sync / machine_floor, "async": s_sync / max(f + b, w, overlap_floor),
                                  "dear": s_sync / max(dear_denominator, overlap_floor)}
        for c in PEERS:
            if c in per:
                # Their steps are synchronous: no synchronous step can lead them by more than this.
                print("%s's step %.1f ms: a synchronous step could lead it by %.2fx at most%s"
                      % (LEAD_NAME[c], 1e3 * step[c], step[c] / floor,
                         "" if machine_floor is None else
                         " (%.2fx over %s)" % (step[c] / machine_floor,
                                              "the overlap floor" if p is not None else "the CPU floor")))
    print("\n| contender | samples/s (median) | min .. max | step (ms) | vs ddp (median, min .. max) | "
          "vs horovod (median, min .. max) | vs sync | bound vs sync | machine bound vs sync |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in names:
        vs_sync = ("%.2fx" % med(a / s for a, s in zip(per[c], per["sync"]))) if "sync" in per else "-"
        print("| %s | %s | %s | %.1f | %s | %s | %s | %s | %s |" % (
            label(args, c), rate(med(per[c])), spread2(per[c]), 1e3 * step[c],
            ratio(per[c], per["ddp"]) if "ddp" in per else "-",
            ratio(per[c], per["horovod"]) if "horovod" in per else "-", vs_sync,
            ("%.2fx" % bounds[c]) if c in bounds else "-",
            ("%.2fx" % machine_bounds[c]) if c in machine_bounds else "-"))
    return per, bounds, floor


def med_of(runs, key):
    """The median of a figure over the dadt launches, or None if a launch lacks it (a run saved
    before the figure was measured)."""
    return statistics.median(d[key] for d in runs) if all(key in d for d in runs) else None


def rate(v):
    return "%.1f" % v if v >= 100 else "%.2f" % v


def spread2(v):
    """peers.spread, with decimals where the rates are small (a few samples/s on CPU)."""
    return spread(v) if min(v) >= 100 else "%.2f .. %.2f" % (min(v), max(v))


def from_json(args):
    """Prints the tables of a run saved with --json again (e.g. after a change to the report)."""
    try:
        with open(args.from_json) as f:
            saved = json.load(f)
        if not isinstance(saved, dict) or not {"args", "runs"} <= set(saved):
            raise ValueError("no 'args' and 'runs' at the top")
    except (OSError, ValueError) as e:
        sys.exit("real_models: cannot read the run saved in %s (%s: %s); --from-json takes a file written "
                 "by --json" % (args.from_json, type(e).__name__, e))
    for key in ("np", "link_mb_per_s", "ddp_tuned_bucket_mb", "image_size", "seq_len"):
        if key in saved["args"]:
            setattr(args, key, saved["args"][key])
    for model, runs in saved["runs"].items():
        names = sorted((c for c in runs[0] if all(c in r for r in runs)), key=CONTENDERS.index)
        report(args, model, names, runs)


def passed_through():
    """DADT_* and HOROVOD_* variables that reach the launches (the tuning knobs do not)."""
    return sorted(k for k in os.environ if k.startswith(("DADT_", "HOROVOD_")) and k not in TUNING_VARIABLES)


def driver(args):
    if args.from_json:
        return from_json(args)
    names = contenders(args)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in bench_models.MODELS:
            sys.exit("real_models: unknown model %r (choose from %s)" % (m, ", ".join(bench_models.MODELS)))
    print("real_models: %d ranks on %s; %d rounds; each launch: %d warm-up steps, %d chunks of %d steps; "
          "%d torch thread(s) per rank; every contender at its defaults (ddp: bucket_cap_mb 25 and "
          "broadcast_buffers; ddp-tuned: bucket_cap_mb %g; Horovod and dadt: no fusion threshold, cycle "
          "time or autotune set)%s"
          % (args.np, hostlist(args), args.rounds, args.warmup_steps, args.chunks, args.steps, args.threads,
             args.ddp_tuned_bucket_mb,
             "; passed through: " + ", ".join(passed_through()) if passed_through() else ""))
    everything = {}
    for model in models:
        runs = []
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            print("%s: round %d/%d: %s" % (model, r + 1, args.rounds, ", ".join(order)), file=sys.stderr,
                  flush=True)
            runs.append({c: launch(args, c, model) for c in order})
        everything[model] = runs
        report(args, model, names, runs)
        if args.json:  # after every model, so that a run cut short keeps what it measured
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "runs": everything}, f, indent=1)


def main():
    args = parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
