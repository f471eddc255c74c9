"""Training throughput of dadt against its real peers: torch DDP (gloo), Horovod, and dadt's own
sync, async and dear modes, on the same model, data and optimizer, over several shapes.

    python examples/benchmarks/peers.py --np 2                                   # one host
    python examples/benchmarks/peers.py --np 2 --horovodrun /opt/horovod-peer/bin/horovodrun
    python examples/benchmarks/peers.py --np 2 --hosts h1:1,h2:1 --network-interface dadt0 --link-mb-per-s 117
    python examples/benchmarks/peers.py --np 2 --fp16       # adds each peer's fp16 compression

Every contender runs in its own launch; one round launches each contender once, in an order rotated
from round to round, so that a slow spell of the machine hits every contender alike. A launch warms
up, then times --chunks consecutive chunks of --steps steps, with no pause between them (so that
async's and dear's pipelines stay full, as in training); its figure is the median samples/s of its
chunks.
The table gives, per shape and contender, the median over rounds, the spread (min .. max), and the
median over rounds of the ratios to DDP's and Horovod's launches in the same round (an -fp16 row
against ddp-fp16 and horovod-fp16). Under each shape's header, how far any synchronous step could
lead Horovod: Horovod's step over the synchronous floor below.
--from-json re-prints the tables of a run saved with --json.

Shapes (MLPs on synthetic data, SGD with momentum; --shapes picks some):
  compute   2 x 512 wide, batch 1024 per rank: computation dominates, gradients are 1.6 MB;
  balanced  4 x 1024 wide, batch 256 per rank: computation about equals the allreduce on one host;
  comm      4 x 1536 wide, batch 64 per rank (7.5M parameters, 30 MB of gradients): the wire dominates.
Each shape's header prints what the launches measured of it: forward and backward time of one step
on one rank (F, B), when backward makes each gradient, and the time of one allreduce of all the
gradients through dadt (W). From these, the overlap bound of each mode, its shortest possible step:
  sync: F + max(B, E), where E is when the wire's last byte can be through at the earliest, each
    gradient leaving once backward has made it, and it and those after it taking their share of W
    (the next forward needs every reduced gradient);
  async hides the allreduce of step t behind step t+1: max(F + B, W);
  dear hides the reduce-scatter half behind backward and the all-gather half behind the next
    forward, max(F, W/2) + max(B, W/2), but not the chain C between them: after a step's last
    all-gather (the last bucket in layer order, by dadt's own plan) come that bucket's update, the
    forward from its first layer on and the backward down to the first bucket it fills, before the
    next reduce-scatter can start. So also W + C.
'bound vs sync' is the measured sync step time over that bound: the speed-up each mode could reach.

Contenders: ddp (DistributedDataParallel, gloo, bucket_cap_mb = dadt's fusion threshold), horovod
(horovod.torch.DistributedOptimizer under `horovodrun --gloo`, when --horovodrun is given), sync,
async, dear (dadt.torch.DistributedOptimizer(mode=...) under `dadtrun --gloo`). With --fp16 also
ddp-fp16 (DDP's fp16_compress_hook), horovod-fp16 (Compression.fp16) and sync-fp16 (dadt's
Compression.fp16).
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

MiB = 1024 * 1024
SHAPES = {  # name: (layers, width, batch per rank)
    "compute": (2, 512, 1024),
    "balanced": (4, 1024, 256),
    "comm": (4, 1536, 64),
}
DADT_MODES = ("sync", "async", "dear")
INPUT_DIM = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks (default 2)")
    p.add_argument("--hosts", default=None, help="host list for both launchers, e.g. a:1,b:1 (default: this host)")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shapes (default all)")
    p.add_argument("--contenders", default=None,
                   help="comma-separated subset of ddp,horovod,sync,async,dear (+ -fp16 forms with --fp16)")
    p.add_argument("--fp16", action="store_true", help="also each peer's fp16 gradient compression")
    p.add_argument("--rounds", type=int, default=3, help="launches per contender and shape (default 3)")
    p.add_argument("--chunks", type=int, default=5, help="timed chunks per launch (default 5)")
    p.add_argument("--steps", type=int, default=5, help="steps per chunk (default 5)")
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--fusion-threshold-mb", type=float, default=4.0,
                   help="dadt's fusion threshold and DDP's bucket_cap_mb (Horovod: HOROVOD_FUSION_THRESHOLD)")
    p.add_argument("--dadtrun", default=None, help="dadt's launcher (default: $DADTRUN, PATH, bazel-bin)")
    p.add_argument("--horovodrun", default=None, help="Horovod's launcher; its python runs the Horovod rows")
    p.add_argument("--dadtrun-args", default="", help="extra dadtrun arguments")
    p.add_argument("--network-interface", default=None,
                   help="the interface between the hosts, for both launchers (e.g. dadt0 on the namespace hosts)")
    p.add_argument("--link-mb-per-s", type=float, default=None, help="the link's measured rate, for the header")
    p.add_argument("--json", metavar="FILE", help="also write every launch's figures as JSON")
    p.add_argument("--from-json", metavar="FILE", help="print the tables of a run saved with --json; launch nothing")
    # worker
    p.add_argument("--worker", choices=["ddp", "ddp-fp16", "horovod", "horovod-fp16", "sync", "sync-fp16",
                                        "async", "dear"], help=argparse.SUPPRESS)
    p.add_argument("--shape", choices=list(SHAPES), help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# Worker: one contender, one shape
# ----------------------------------------------------------------------------------------------
def build(torch, shape):
    layers, width, batch = SHAPES[shape]
    torch.manual_seed(1234)
    nn = torch.nn
    mods, dim = [], INPUT_DIM
    for _ in range(layers):
        mods += [nn.Linear(dim, width), nn.ReLU()]
        dim = width
    return nn.Sequential(*mods, nn.Linear(dim, 10)), batch


def phase_times(torch, model, x, y, reps=5, loss_of=None):
    """One rank's computation of a step, no communication; medians of `reps` after a warm-up.
    The step's loss is cross_entropy(model(x), y), or loss_of(model) when given (real_models.py).
    forward_s and backward_s (the loss counts as forward); grad_ready: [seconds into backward,
    bytes] of every gradient, in the order backward produces them; dear_chain_s: what dear must
    compute between the last all-gather of a step and the first reduce-scatter of the next,
    with dadt's own bucket plan (see the module's doc)."""
    import torch.nn.functional as F
    from dadt.torch.training_modes import DearEngine, layer_order, plan_buckets
    params = layer_order(list(model.parameters()), model)
    # dear's own plan, at its own default size
    buckets = plan_buckets(params, DearEngine.planned_bucket_bytes(params), large_alone=True)
    bucket_of = {id(p): i for i, b in enumerate(buckets) for p in b}
    last = {id(p) for p in buckets[-1]}  # gathered last, as the next forward reaches it
    stamps, entered = {}, []

    def made(p):
        stamps.setdefault(id(p), time.perf_counter())

    hooks = [p.register_post_accumulate_grad_hook(made) for p in params]
    hooks += [m.register_forward_pre_hook(lambda *_: entered.append(time.perf_counter()))
              for m in model.modules() if any(id(p) in last for p in m.parameters(recurse=False))]
    update = torch.optim.SGD(buckets[-1], lr=1e-3, momentum=0.9)  # the last bucket's update alone
    fwd, bwd, ready, chain = [], [], [], []
    for _ in range(reps + 1):
        model.zero_grad()
        stamps.clear()
        entered.clear()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x), y) if loss_of is None else loss_of(model)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        update.step()
        t3 = time.perf_counter()
        order = sorted(params, key=lambda p: stamps[id(p)])
        left = [len(b) for b in buckets]
        for p in order:  # the first bucket to fill, whose reduce-scatter could start first
            left[bucket_of[id(p)]] -= 1
            if not left[bucket_of[id(p)]]:
                first_full = stamps[id(p)] - t1
                break
        fwd.append(t1 - t0)
        bwd.append(t2 - t1)
        ready.append([stamps[id(p)] - t1 for p in params])
        chain.append((t1 - min(entered)) + first_full + (t3 - t2))
    for h in hooks:
        h.remove()
    med = statistics.median
    ready = sorted([med(r[i] for r in ready[1:]), p.numel() * p.element_size()] for i, p in enumerate(params))
    return {"forward_s": med(fwd[1:]), "backward_s": med(bwd[1:]), "dear_chain_s": med(chain[1:]),
            "grad_ready": ready}


def whole_allreduce(torch, dadt, model, name="peers.W"):
    """W and what it costs the rank: {"allreduce_s": the median time of one allreduce of every
    gradient of `model`, as one tensor, through dadt; "allreduce_cpu_s": the median CPU time (user
    and system, every thread of this process) of the same allreduce}, 5 timed after one warm-up,
    each started together by a barrier. Kernel work that lands on another process (a veth peer's
    receive) is not in the CPU figure."""
    grads = torch.zeros(sum(p.numel() for p in model.parameters()))
    walls, cpus = [], []
    for _ in range(6):
        dadt.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        dadt.allreduce_(grads, name=name)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {"allreduce_s": statistics.median(walls[1:]), "allreduce_cpu_s": statistics.median(cpus[1:])}


def overlapped_step(torch, dadt, model, loss_of, reps=3, name="peers.P"):
    """What perfect overlap gives on this machine: {"compute_s": C, one step's computation alone
    (forward, backward of loss_of(model), and SGD with momentum over every parameter: the
    optimizer's update, which the F and B of phase_times leave out); "overlap_step_s": P, the same
    computation run while one allreduce of all the gradients (as W) is in flight in dadt's
    background thread, to its end}. Medians of `reps` after a warm-up, the two alternated, each
    started together by a barrier. P is what a step that overlaps all its communication with all
    its computation takes here, with the CPU the allreduce costs (its reductions, copies and
    sockets' system time), the cache and memory traffic both make, and the switches between the
    threads; where a rank has one core, that is much more than max(C, W). It changes the model's
    weights (call it before the parameters are broadcast)."""
    grads = torch.zeros(sum(p.numel() for p in model.parameters()))
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def compute():
        model.zero_grad()
        loss_of(model).backward()
        sgd.step()

    alone, both = [], []
    for _ in range(reps + 1):
        dadt.barrier()
        t0 = time.perf_counter()
        compute()
        alone.append(time.perf_counter() - t0)
        dadt.barrier()
        t0 = time.perf_counter()
        handle = dadt.allreduce_async_(grads, name=name)
        compute()
        dadt.synchronize(handle)
        both.append(time.perf_counter() - t0)
    model.zero_grad()
    return {"compute_s": statistics.median(alone[1:]), "overlap_step_s": statistics.median(both[1:])}


def whole_allreduce_s(torch, dadt, model, name="peers.W"):
    """W alone (whole_allreduce's "allreduce_s")."""
    return whole_allreduce(torch, dadt, model, name)["allreduce_s"]


def timed_chunks(args, steps, drain, barrier, samples_per_step):
    """A launch's figure: --warmup-steps steps, then --chunks consecutive chunks of --steps steps,
    samples/s of each. The chunks follow each other with no pause, as training's steps do: a drain
    between them would end each chunk with the next step's collectives already using the link but
    not counted (async and dear keep one step in flight), which cost async ~5% in 5-step chunks."""
    steps(args.warmup_steps)
    drain()
    barrier()
    steps(1)  # steady state: async's allreduce of this step is in flight when timing starts
    chunks = []
    t0 = time.perf_counter()
    for _ in range(args.chunks):
        steps(args.steps)
        t1 = time.perf_counter()
        chunks.append(samples_per_step * args.steps / (t1 - t0))
        t0 = t1
    drain()
    return chunks


def report_result(rank, size, extra, chunks):
    """Rank 0 prints the launch's measurements on one RESULT line, which run_launch reads."""
    if rank == 0:
        print("RESULT " + json.dumps(dict(extra, samples_per_sec=chunks, size=size)), flush=True)


def run_launch(cmd, env, prog, what):
    """Runs one launch and returns its RESULT, or exits naming `what` with the launch's output."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=1800)
    except subprocess.TimeoutExpired:
        sys.exit("%s: %s did not finish in 30 minutes" % (prog, what))
    for line in proc.stdout.splitlines():
        m = re.search(r"RESULT (\{.*\})$", line)
        if m and proc.returncode == 0:
            return json.loads(m.group(1))
    sys.exit("%s: %s failed (exit %d):\n%s" % (prog, what, proc.returncode, proc.stdout[-3000:]))


def worker(args):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    kind = args.worker
    model, batch = build(torch, args.shape)
    sgd = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    extra = {}
    if kind.startswith("horovod"):
        import horovod.torch as hvd
        hvd.init()
        rank, size, barrier = hvd.rank(), hvd.size(), hvd.barrier
        comp = hvd.Compression.fp16 if kind.endswith("fp16") else hvd.Compression.none
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), compression=comp)
        drain, finish = (lambda: None), hvd.shutdown
    elif kind.startswith("ddp"):
        import torch.distributed as dist
        dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from dadtrun
        rank, size, barrier = dist.get_rank(), dist.get_world_size(), dist.barrier
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, bucket_cap_mb=args.fusion_threshold_mb)
        if kind.endswith("fp16"):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        opt, drain, finish = sgd, (lambda: None), dist.destroy_process_group
    else:
        import dadt.torch as dadt
        dadt.init()
        rank, size, barrier = dadt.rank(), dadt.size(), dadt.barrier
        mode = kind.split("-")[0]
        comp = dadt.Compression.fp16 if kind.endswith("fp16") else dadt.Compression.none
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(batch, INPUT_DIM, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        extra.update(phase_times(torch, model, x, y))
        extra["allreduce_s"] = whole_allreduce_s(torch, dadt, model)
        dadt.broadcast_parameters(model.state_dict(), root_rank=0)
        # Buckets: dadt's default (the fusion threshold dadtrun passes; dear's rule across hosts).
        opt = dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), mode=mode, model=model,
                                        compression=comp)
        drain = getattr(opt, "flush", lambda: None)
        finish = dadt.shutdown
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(batch, INPUT_DIM, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)

    def steps(n):
        for _ in range(n):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()

    report_result(rank, size, extra, timed_chunks(args, steps, drain, barrier, size * batch))
    finish()
    if kind.startswith("ddp"):
        # torch 2.13: freeing DDP's reducer at exit can deadlock (~ProcessGroupGloo holds its
        # lock while a gloo thread waits for the GIL to free a comm hook's tensor): seen on the
        # two namespace hosts with fp16_compress_hook. The results are out; leave at once.
        sys.stdout.flush()
        os._exit(0)


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def hostlist(args):
    return args.hosts or "localhost:%d" % args.np


def command(args, kind, shape):
    me = os.path.abspath(__file__)
    tail = ["--worker", kind, "--shape", shape, "--chunks", str(args.chunks), "--steps", str(args.steps),
            "--warmup-steps", str(args.warmup_steps), "--threads", str(args.threads),
            "--fusion-threshold-mb", str(args.fusion_threshold_mb)]
    if kind.startswith("horovod"):
        hvd_python = os.path.join(os.path.dirname(args.horovodrun), "python3")
        env = dict(os.environ, HOROVOD_FUSION_THRESHOLD=str(int(args.fusion_threshold_mb * MiB)))
        nic = ["--network-interface", args.network_interface] if args.network_interface else []
        return [args.horovodrun, "--gloo", "-np", str(args.np), "-H", hostlist(args), *nic, hvd_python,
                me] + tail, env
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("peers: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    hosts = ["-H", args.hosts] if args.hosts else []
    hosts += ["--network-interface", args.network_interface] if args.network_interface else []
    cmd = [dadtrun, "--gloo", "-np", str(args.np), *hosts, "--fusion-threshold-mb", str(args.fusion_threshold_mb),
           *args.dadtrun_args.split(), sys.executable, me] + tail
    return cmd, worker_environment()


def launch(args, kind, shape):
    cmd, env = command(args, kind, shape)
    return run_launch(cmd, env, "peers", "%s on %s" % (kind, shape))


def contenders(args):
    if args.contenders:
        chosen = [c for c in args.contenders.split(",") if c]
    else:
        chosen = ["ddp"] + (["horovod"] if args.horovodrun else []) + list(DADT_MODES)
        if args.fp16:
            chosen += ["ddp-fp16"] + (["horovod-fp16"] if args.horovodrun else []) + ["sync-fp16"]
    for c in chosen:
        if c.startswith("horovod") and not args.horovodrun:
            sys.exit("peers: %s needs --horovodrun (see /work/shared/peers or build Horovod 0.28.1)" % c)
    if "ddp" not in chosen:
        sys.exit("peers: ddp is the reference of every ratio; keep it among --contenders")
    return chosen


def spread(v):
    return "%.0f .. %.0f" % (min(v), max(v))


def report(args, shape, names, runs):
    """runs: round -> contender -> the launch's result."""
    layers, width, batch = SHAPES[shape]
    per = {c: [statistics.median(r[c]["samples_per_sec"]) for r in runs] for c in names}
    dadt_runs = [r[m] for r in runs for m in DADT_MODES if m in r]
    params = (INPUT_DIM * width + width) + (layers - 1) * (width * width + width) + (width * 10 + 10)
    print("\n### %s: %d x %d MLP, batch %d per rank, %.2fM parameters (%.1f MB of fp32 gradients), %d ranks"
          % (shape, layers, width, batch, params / 1e6, params * 4 / 1e6, args.np))
    bounds = {}
    if dadt_runs:
        med = statistics.median
        f, b, w = (med(d[k] for d in dadt_runs) for k in ("forward_s", "backward_s", "allreduce_s"))
        print("F (forward) %.1f ms, B (backward) %.1f ms, W (one allreduce of all gradients) %.1f ms"
              % (1e3 * f, 1e3 * b, 1e3 * w))
        if args.link_mb_per_s:
            wire = 2 * (args.np - 1) / args.np * params * 4 / (args.link_mb_per_s * 1e6)
            print("a ring allreduce of the gradients at %.0f MB/s takes %.1f ms on the wire"
                  % (args.link_mb_per_s, 1e3 * wire))
        floor = f + max(b, comm_end(dadt_runs, w))
        recorded = all("dear_chain_s" in d for d in dadt_runs)  # not in runs saved before it was
        chain = med(d["dear_chain_s"] for d in dadt_runs) if recorded else 0.0
        print("no synchronous step is shorter than %.1f ms (F, then the wire's last byte: a gradient "
              "cannot leave before backward makes it); dear's chain between a step's last all-gather "
              "and the next step's first reduce-scatter: %s" % (1e3 * floor, "%.1f ms" % (1e3 * chain)
                                                                 if recorded else "not recorded"))
        if "sync" in per:
            t_sync = args.np * batch / med(per["sync"])  # one step, in seconds
            bounds = {"sync": t_sync / floor, "async": t_sync / max(f + b, w),
                      "dear": t_sync / max(max(f, w / 2) + max(b, w / 2), w + chain)}
        if "horovod" in per:
            # Horovod's step is synchronous too: no sync-mode step can lead it by more than this.
            t_hvd = args.np * batch / med(per["horovod"])
            print("Horovod's step %.1f ms: a synchronous step can lead it by %.2fx at most"
                  % (1e3 * t_hvd, t_hvd / floor))
    print("\n| contender | samples/s (median) | min .. max | vs ddp (median, min .. max) | "
          "vs horovod (median, min .. max) | vs sync | bound vs sync |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in names:
        vs_sync = ("%.2fx" % statistics.median(a / s for a, s in zip(per[c], per["sync"]))) if "sync" in per else "-"
        bound = ("%.2fx" % bounds[c]) if c in bounds else "-"
        # An fp16 row against the peers' fp16 rows: each compressed contender against its like.
        ddp, hvd = ("ddp-fp16", "horovod-fp16") if c.endswith("-fp16") else ("ddp", "horovod")
        print("| %s | %.1f | %s | %s | %s | %s | %s |" % (
            c, statistics.median(per[c]), spread(per[c]), ratio(per[c], per[ddp]) if ddp in per else "-",
            ratio(per[c], per[hvd]) if hvd in per else "-", vs_sync, bound))
    return per


def comm_end(dadt_runs, w):
    """When, into backward, the last byte of a step's gradients can be through the wire at the
    earliest: each gradient leaves once backward has made it, and it and every gradient made
    after it take their share of W. Runs saved before the gradients' times were recorded count
    every gradient as ready at once (W)."""
    ready = [d.get("grad_ready", [[0.0, 1]]) for d in dadt_runs]
    times = [statistics.median(r[i][0] for r in ready) for i in range(len(ready[0]))]
    sizes = [n for _, n in ready[0]]
    end, total = 0.0, sum(sizes)
    left = total
    for t, n in zip(times, sizes):
        end = max(end, t + w * left / total)
        left -= n
    return end


def ratio(mine, theirs):
    """The median over rounds of mine / theirs (each round's launches), with the spread."""
    r = [a / b for a, b in zip(mine, theirs)]
    return "%.2fx (%.2f .. %.2f)" % (statistics.median(r), min(r), max(r))


def from_json(args):
    """Prints the tables of a run saved with --json again (e.g. after a change to the report)."""
    try:
        with open(args.from_json) as f:
            saved = json.load(f)
        if not isinstance(saved, dict) or not {"args", "runs"} <= set(saved):
            raise ValueError("no 'args' and 'runs' at the top")
    except (OSError, ValueError) as e:
        sys.exit("peers: cannot read the run saved in %s (%s: %s); --from-json takes a file written by "
                 "--json" % (args.from_json, type(e).__name__, e))
    for key in ("np", "link_mb_per_s"):
        setattr(args, key, saved["args"].get(key))
    for shape, runs in saved["runs"].items():
        names = [c for c in runs[0] if all(c in r for r in runs)]
        names.sort(key=lambda c: (c.endswith("-fp16"), ["ddp", "horovod", *DADT_MODES].index(c.split("-")[0])))
        report(args, shape, names, runs)


def driver(args):
    if args.from_json:
        return from_json(args)
    names = contenders(args)
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            sys.exit("peers: unknown shape %r (choose from %s)" % (s, ", ".join(SHAPES)))
    print("peers: %d ranks on %s; %d rounds; each launch: %d warm-up steps, %d chunks of %d steps; "
          "%d torch thread(s) per rank; bucket/fusion threshold %.1f MiB"
          % (args.np, hostlist(args), args.rounds, args.warmup_steps, args.chunks, args.steps, args.threads,
             args.fusion_threshold_mb))
    everything = {}
    for shape in shapes:
        runs = []
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            print("%s: round %d/%d: %s" % (shape, r + 1, args.rounds, ", ".join(order)), file=sys.stderr,
                  flush=True)
            runs.append({c: launch(args, c, shape) for c in order})
        everything[shape] = runs
        report(args, shape, names, runs)
    if args.json:
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
