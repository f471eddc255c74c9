"""Time to accuracy: dadt's training modes against torch DDP, its compression hooks, torch's
post-local SGD and torchft's LocalSGD and DiLoCo, on a real learning task over a (shaped) link.
One file (over 500 lines) because it launches itself as every contender's worker (`--worker`) on
every host: the task, the contenders and the report travel together as one script.

    python3 examples/benchmarks/time_to_accuracy.py --np 2 --samples 4096             # one host
    python3 examples/benchmarks/time_to_accuracy.py --hosts h1:1,h2:1 --network-interface dadt0 \\
        --link 100mbit --json tta.json --plot tta.png                                   # two hosts
    python3 examples/benchmarks/time_to_accuracy.py --from-json tta.json                # re-print
    sudo RATE=100mbit examples/benchmarks/time_to_accuracy.sh --rounds 3                # shaped link

Task. A character-level (byte) language model over the Python standard library's own source:
every *.py file under sysconfig.get_paths()["stdlib"] (site-packages left out), split BY MODULE
into training and validation files by a hash of the file's relative path (sha1, so the split is
the same on every host and run): no validation text is ever trained on. Vocabulary: the 256
byte values. The training files are dealt to the ranks in turn (file i of the sorted list to rank
i mod n), and each rank draws random windows from its own shard with its own seed, the same
sequence in every launch. Validation: a fixed set of --val-windows windows spread evenly over the
validation files, the same for every contender; the loss is the mean cross entropy per byte
(nats) over every position of every window.

Model. A decoder-only causal transformer (pre-norm blocks, learned positions, untied output
layer): by default d_model 320, 4 layers, 5 heads, feed-forward 1280, context 64, 5.1M
parameters. AdamW (weight decay 0.01) is the optimizer of every contender (the inner optimizer of
the local ones); one compute thread per rank (torch.set_num_threads(1)).

Contenders (each in its own launch, `dadtrun --gloo`; the torch ones use the torchrun variables
dadtrun exports, MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE, to init_process_group("gloo")):
  ddp               DistributedDataParallel, default bucket_cap_mb (25)
  ddp-fp16          DDP + fp16_compress_hook
  ddp-powersgd      DDP + powerSGD_hook, PowerSGDState(matrix_approximation_rank=R), torch's
                    defaults otherwise (start_powerSGD_iter 1000: plain allreduce before it;
                    --powersgd-start-iter changes it; R: --powersgd-rank, default 4)
  post-local-sgd    DDP + post_localSGD_hook (PostLocalSGDState, per-host subgroups) and
                    PostLocalSGDOptimizer(PeriodicModelAverager(period=H, warmup_steps=W))
  torchft-localsgd  torchft.local_sgd.LocalSGD(sync_every=H)   } one torchft replica group per
  torchft-diloco    torchft.local_sgd.DiLoCo(sync_every=H)     } rank, a Lighthouse on rank 0
  sync, async, dear dadt.torch.DistributedOptimizer(mode=...)
  sync-powersgd     mode="sync", compression=Compression.powersgd(rank=R, start_iter=S): the same
                    rank R and start S as ddp-powersgd, the same defaults otherwise (error feedback,
                    warm start, min_compression_rate 2); P and Q allreduces pipelined with backward
  local_sgd         mode="local_sgd", sync_every=H, warmup_steps=0
  local_sgd-streaming  the same with fragments=4, fragment_sync_delay=1 (each rank keeps the step
                    it took while a fragment's average travelled)
  local_sgd-int8    streaming, and the weights' change since the last average as int8
  diloco            mode="diloco", sync_every=H, outer SGD(lr 0.7, momentum 0.9, nesterov)
  diloco-streaming  the same with fragments=4, fragment_sync_delay=1
  diloco-int8       streaming, and the pseudo-gradient as int8 (Compression.int8, error feedback)
  easgd             mode="easgd", sync_every=H
  easgd-async       mode="easgd", sync_every=H, asynchronous=True
  gossip            mode="gossip" (AD-PSGD: each step's weights swapped in the background with
                    whichever rank is free, half the difference added when the swap returns)
  gossip-sgp        mode="gossip", algorithm="sgp" (push-sum on the exponential graph)
torchft's DiLoCo uses the same outer optimizer as dadt's.

Measurement. Every launch trains the same sample budget (--samples windows over all ranks).
Every --eval-samples samples (a whole number of periods H) rank 0 copies its model's weights (the
clock is paused for the copy); the copies are evaluated after training, so wall time counts
neither evaluation nor startup (import, data, connection set-up; torchft's first quorum, which
sets up its process group, is taken before the clock starts). After the last step dadt's modes
call flush() and post-local SGD averages the weights once more (torch's average_parameters): the
point after it (every rank holds the same weights; its time includes that exchange) is the
launch's final one. The model evaluated is rank 0's own: the same on every rank for the DDP rows,
sync and dear (dear's flush() runs before each copy, timed: it applies the deferred updates that
the next forward would apply anyway); at evaluation steps, just exchanged, for local_sgd, diloco
and torchft's two; rank 0's local model for async (one step stale), easgd, the streaming ones and
post-local SGD (its averager runs after steps 1, H+1, ...).

--overrun K lets the periodic contenders (post-local SGD, torchft's two, dadt's modes that send
less), the two PowerSGD ones and gossip train K times the budget: cheaper per step but behind at equal samples, they may still reach
DDP's final loss sooner; their loss at equal samples and their wall time at the budget are read at
the budget's evaluation point.

Table, per contender: target A is the median over rounds of DDP's final validation loss (--targets
adds DDP's loss after a fraction of the budget: B, at half of it by default); a loss within
--target-tolerance of a target reaches it (fp16's rounding moves DDP's loss by ~1e-7); time to
target is the first time the loss reaches it, interpolated linearly between evaluation points
(median over rounds, min .. max); ratios are taken within a round (this launch's time / the
reference's time in the same round; below 1 is faster) and their median is shown; final loss at
the equal sample budget; bytes sent per rank per step: dadt's periodic modes measured (the
optimizer's bytes_sent, the payload handed to its allreduces, times 2(n-1)/n for a ring), the rest
computed from what each method sends (model bytes x fraction x frequency, ring allreduce). The
learning rate of each contender is --lr, or per contender from --lrs-from (a JSON written with
--tune), or tuned with --tune: every contender runs each learning rate of --tune-lrs once on
--tune-samples samples and keeps the one with the lowest final validation loss.
"""
import argparse
import hashlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# name: (family, what it is). The order is the table's.
CONTENDERS = {
    "ddp": ("torch", "DDP, gloo, bucket_cap_mb 25"),
    "ddp-fp16": ("torch", "DDP + fp16_compress_hook"),
    "ddp-powersgd": ("torch", "DDP + powerSGD_hook, rank R"),
    "post-local-sgd": ("torch", "DDP + post_localSGD_hook, PeriodicModelAverager(H)"),
    "torchft-localsgd": ("torchft", "torchft 0.2.0 LocalSGD(H)"),
    "torchft-diloco": ("torchft", "torchft 0.2.0 DiLoCo(H)"),
    "sync": ("dadt", "mode=sync"),
    "async": ("dadt", "mode=async"),
    "dear": ("dadt", "mode=dear"),
    "sync-powersgd": ("dadt", "mode=sync, Compression.powersgd(rank R)"),
    "local_sgd": ("dadt", "mode=local_sgd(H)"),
    "local_sgd-streaming": ("dadt", "mode=local_sgd(H), fragments 4, delay 1"),
    "local_sgd-int8": ("dadt", "mode=local_sgd(H), fragments 4, delay 1, Compression.int8"),
    "diloco": ("dadt", "mode=diloco(H)"),
    "diloco-streaming": ("dadt", "mode=diloco(H), fragments 4, delay 1"),
    "diloco-int8": ("dadt", "mode=diloco(H), fragments 4, delay 1, Compression.int8"),
    "easgd": ("dadt", "mode=easgd(H)"),
    "easgd-async": ("dadt", "mode=easgd(H), asynchronous"),
    "gossip": ("dadt", "mode=gossip (AD-PSGD), graph complete"),
    "gossip-sgp": ("dadt", "mode=gossip, algorithm sgp"),
}
REFERENCES = ("ddp", "torchft-diloco", "post-local-sgd", "ddp-powersgd")  # the ratio columns (those run)
PERIODIC = ("post-local-sgd", "torchft-localsgd", "torchft-diloco", "local_sgd",
            "local_sgd-streaming", "local_sgd-int8", "diloco",
            "diloco-streaming", "diloco-int8", "easgd", "easgd-async")
POWERSGD = ("ddp-powersgd", "sync-powersgd")
GOSSIP = ("gossip", "gossip-sgp")
# Trained --overrun times the budget: cheaper per step than DDP, behind it at equal samples.
OVERRUN = PERIODIC + POWERSGD + GOSSIP
STREAMING = ("local_sgd-streaming", "local_sgd-int8", "diloco-streaming", "diloco-int8")
VOCAB = 256
SKIP_DIRS = ("site-packages", "dist-packages", "__pycache__")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=None, help="ranks (default: the slots of --hosts, else 2)")
    p.add_argument("--hosts", default=None, help="dadtrun host list, e.g. h1:1,h2:1 (default: this host)")
    p.add_argument("--network-interface", default=None, help="interface between the hosts (dadt0 on netns hosts)")
    p.add_argument("--dadtrun", default=None, help="dadt's launcher (default: $DADTRUN, PATH, bazel-bin)")
    p.add_argument("--dadtrun-args", default="", help="extra dadtrun arguments")
    p.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated subset (default all)")
    p.add_argument("--rounds", type=int, default=3, help="launches per contender, round-robin (default 3)")
    p.add_argument("--overrun", type=float, default=1.0,
                   help="the periodic contenders (post-local SGD, torchft's, dadt's modes that send less) "
                        "train this many times the budget, so that one that is cheaper per step but "
                        "behind at equal samples can still reach the target; their loss at equal samples "
                        "is read at the budget (default 1)")
    p.add_argument("--samples", type=int, default=16384, help="sample budget: windows over all ranks")
    p.add_argument("--eval-samples", type=int, default=2048, help="samples between evaluation points")
    p.add_argument("--batch", type=int, default=16, help="windows per rank per step (default 16)")
    p.add_argument("--context", type=int, default=64, help="bytes per window (default 64)")
    p.add_argument("--d-model", type=int, default=320)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=5)
    p.add_argument("--d-ff", type=int, default=1280)
    p.add_argument("--sync-every", type=int, default=20, help="H of every periodic method (default 20)")
    p.add_argument("--post-local-warmup", type=int, default=0,
                   help="post-local SGD's DDP steps before local SGD (start_localSGD_iter = warmup_steps)")
    p.add_argument("--powersgd-start-iter", type=int, default=None,
                   help="PowerSGD's plain steps first: start_powerSGD_iter, dadt's start_iter "
                        "(default: torch's, 1000)")
    p.add_argument("--powersgd-rank", type=int, default=4,
                   help="PowerSGD's rank of ddp-powersgd and sync-powersgd (default 4)")
    p.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo's outer SGD learning rate (default 0.7)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate of every contender (default 1e-3)")
    p.add_argument("--lrs-from", metavar="FILE", help="per-contender learning rates from a --tune run's JSON")
    p.add_argument("--tune", action="store_true", help="tune each contender's learning rate first")
    p.add_argument("--tune-lrs", default="5e-4,1e-3,2e-3", help="the grid of --tune")
    p.add_argument("--tune-samples", type=int, default=None, help="the budget of a tuning launch (default --samples/4)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="share of modules held out (default 0.1)")
    p.add_argument("--val-windows", type=int, default=96, help="validation windows (default 96)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--targets", default="1,0.5",
                   help="targets: DDP's validation loss at these fractions of the budget (median over rounds); "
                        "the first is the main table's (default 1,0.5)")
    p.add_argument("--target-tolerance", type=float, default=1e-3,
                   help="a loss within this much (nats) of a target reaches it: rounding, as fp16's (default 1e-3)")
    p.add_argument("--link", default=None, help="the link's rate, for the header (e.g. 100mbit)")
    p.add_argument("--launch-timeout", type=int, default=1800, help="seconds per launch before it is stopped")
    p.add_argument("--json", metavar="FILE", help="write every launch's results as JSON (also as they come)")
    p.add_argument("--plot", metavar="PNG", help="validation loss against wall time, one line per launch")
    p.add_argument("--from-json", metavar="FILE", help="print the tables (and --plot) of a saved run; launch nothing")
    p.add_argument("--worker", choices=list(CONTENDERS), help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--eval-every", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.names = [c for c in args.contenders.split(",") if c]
    for c in args.names:
        if c not in CONTENDERS:
            p.error("unknown contender %r (choose from %s)" % (c, ", ".join(CONTENDERS)))
    if args.np is None:
        args.np = sum(int(h.rsplit(":", 1)[1]) if ":" in h else 1 for h in args.hosts.split(",")) if args.hosts else 2
    streaming = sorted(set(STREAMING) & set(args.names))
    if streaming and (args.sync_every % 4 or args.sync_every < 8):
        p.error("%s need --sync-every of at least 8 and divisible by their 4 fragments "
                "(fragment_sync_delay 1 must be below sync_every // 4)" % ", ".join(streaming))
    args.tune_grid = [float(x) for x in args.tune_lrs.split(",") if x]
    args.target_fractions = [float(x) for x in args.targets.split(",") if x]
    if not args.target_fractions or not all(0 < f <= 1 for f in args.target_fractions):
        p.error("--targets takes fractions of the budget in (0, 1], e.g. 1,0.5")
    return args


def budget(samples, eval_samples, batch, ranks, sync_every):
    """(steps, steps between evaluation points): an evaluation every whole number of periods H,
    and the run a whole number of evaluation intervals, each rounded up."""
    per_step = batch * ranks
    eval_every = max(1, math.ceil(eval_samples / per_step))
    eval_every = sync_every * max(1, math.ceil(eval_every / sync_every))
    steps = eval_every * max(1, math.ceil(samples / per_step / eval_every))
    return steps, eval_every


# ----------------------------------------------------------------------------------------------
# Data: the standard library's modules, split by module
# ----------------------------------------------------------------------------------------------
def stdlib_modules(root):
    """Relative paths of every *.py under `root` (the stdlib), site-packages left out, sorted."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        out += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".py")]
    return sorted(out)


def is_validation(relpath, fraction):
    """Whether a module is held out: the first 8 hex digits of sha1(path) as a fraction of 2^32."""
    h = int(hashlib.sha1(relpath.encode()).hexdigest()[:8], 16)
    return h < fraction * 2 ** 32


def split_modules(relpaths, fraction):
    """(train, validation), each sorted; a module is in exactly one."""
    val = sorted(p for p in relpaths if is_validation(p, fraction))
    held = set(val)
    return sorted(p for p in relpaths if p not in held), val


def rank_files(train, rank, size):
    """Rank `rank`'s shard: training file i goes to rank i mod size."""
    return train[rank::size]


def read_stream(root, relpaths):
    parts = []
    for p in relpaths:
        with open(os.path.join(root, p), "rb") as f:
            parts.append(f.read())
    return b"\n".join(parts)


def val_offsets(length, windows, span):
    """`windows` start offsets spread evenly over a stream of `length` bytes, each `span` long."""
    last = length - span
    if last < 0 or windows < 1:
        raise ValueError("validation stream of %d bytes has no room for %d windows of %d" % (length, windows, span))
    return [round(i * last / max(1, windows - 1)) for i in range(windows)]


# ----------------------------------------------------------------------------------------------
# Bytes on the wire (per rank per step), ring allreduce: 2(n-1)/n of the payload
# ----------------------------------------------------------------------------------------------
def ring(n):
    return 2.0 * (n - 1) / n if n > 1 else 0.0


def powersgd_payload(shapes, rank=4, min_compression_rate=2.0):
    """Elements powerSGD_hook allreduces per step once compressing: each parameter viewed as
    (shape[0], -1); matrices where compression pays (torch's _should_compress) send P and Q,
    r(m + n) elements, the rest (vectors, small matrices) go uncompressed."""
    total = 0
    for s in shapes:
        if len(s) <= 1:
            total += int(math.prod(s))
            continue
        m, n = s[0], int(math.prod(s[1:]))
        r = min(rank, m, n)
        if (m + n) * r * min_compression_rate < m * n:
            total += r * (m + n)
        else:
            total += m * n
    return total


def computed_bytes(name, params, shapes, n, steps, args):
    """What `name` sends per rank per step on average over `steps` (fp32 weights/gradients)."""
    full = 4.0 * params * ring(n)
    H = args.sync_every
    if name in ("ddp", "sync", "async", "dear"):
        return full
    if name == "ddp-fp16":
        return full / 2
    if name in POWERSGD:  # dadt compresses the same matrices as torch
        start = 1000 if args.powersgd_start_iter is None else args.powersgd_start_iter
        plain = min(steps, start)
        rank = getattr(args, "powersgd_rank", 4)
        return (plain * full + (steps - plain) * 4.0 * powersgd_payload(shapes, rank) * ring(n)) / steps
    if name.startswith("gossip"):
        return 4.0 * params  # at most one swap (or push) of the weights per step
    if name == "post-local-sgd":
        warm = min(steps, args.post_local_warmup)
        per_host = max(1, args.np // max(1, len(args.hosts.split(",")) if args.hosts else 1))
        intra = 4.0 * params * ring(per_host)  # the hook's allreduce within each host, every step
        averagings = len([s for s in range(warm, steps) if (s - warm) % H == 0])
        # + the final average_parameters (the flush of this benchmark)
        return (warm * full + (steps - warm) * intra + (averagings + 1) * full) / steps
    return full / H  # torchft LocalSGD / DiLoCo: the weights or pseudo-gradient every H steps


# ----------------------------------------------------------------------------------------------
# Worker: one contender's launch
# ----------------------------------------------------------------------------------------------
def build_model(torch, args):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.ln2, self.fc, self.out = nn.LayerNorm(d), nn.Linear(d, args.d_ff), nn.Linear(args.d_ff, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, 2)
            q, k, v = [z.view(b, t, args.heads, c // args.heads).transpose(1, 2) for z in (q, k, v)]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, args.d_model), nn.Embedding(args.context, args.d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(args.layers)])
            self.ln, self.head = nn.LayerNorm(args.d_model), nn.Linear(args.d_model, VOCAB)

        def forward(self, x):
            h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
            for blk in self.blocks:
                h = blk(h)
            return self.head(self.ln(h))

    torch.manual_seed(args.seed)  # the same initial weights on every rank and in every launch
    return TinyGPT()


def lm_loss(torch, model, windows):
    logits = model(windows[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1))


class Family:
    """The communication of one contender: its optimizer, barrier, flush and shutdown."""
    rank = 0
    size = 1
    bytes_sent = None  # a callable where the contender measures it
    eval_flush = False  # flush() before each evaluation copy (where that leaves the maths unchanged)

    def barrier(self):
        pass

    def flush(self):
        return False  # True: the contender has a flush and ran it

    def finish(self):
        pass


def torch_family(torch, args, model, inner):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook, post_localSGD_hook
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from dadtrun
    fam = Family()
    fam.rank, fam.size = dist.get_rank(), dist.get_world_size()
    fam.barrier = dist.barrier
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's weights
    opt, kind = inner, args.worker
    if kind == "ddp-fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif kind == "ddp-powersgd":
        kw = {} if args.powersgd_start_iter is None else {"start_powerSGD_iter": args.powersgd_start_iter}
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            **kw)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif kind == "post-local-sgd":
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
        from torch.distributed.optim import PostLocalSGDOptimizer
        # The hook's subgroups: one per host (new_subgroups() sizes them by GPUs, 0 on a CPU host).
        hosts = [None] * fam.size
        dist.all_gather_object(hosts, os.uname().nodename)
        groups = [[r for r in range(fam.size) if hosts[r] == h] for h in dict.fromkeys(hosts)]
        subgroup, _ = dist.new_subgroups_by_enumeration(groups)
        state = post_localSGD_hook.PostLocalSGDState(process_group=None, subgroup=subgroup,
                                                     start_localSGD_iter=args.post_local_warmup)
        ddp.register_comm_hook(state, post_localSGD_hook.post_localSGD_hook)
        opt = PostLocalSGDOptimizer(optim=inner, averager=PeriodicModelAverager(
            period=args.sync_every, warmup_steps=args.post_local_warmup))

        def flush():
            # The averager averages after steps W+1, W+H+1, ...: at the end, one more average so
            # that every rank holds the same weights (what dadt's flush() does; timed alike).
            from torch.distributed.algorithms.model_averaging.utils import average_parameters
            average_parameters(ddp.module.parameters(), dist.group.WORLD)
            return True

        fam.flush = flush

    def finish():
        # torch 2.13: freeing DDP's reducer at exit can deadlock (peers.py); results are out.
        sys.stdout.flush()
        os._exit(0)

    fam.finish = finish
    return fam, ddp, opt


def torchft_family(torch, args, model, inner):
    """One torchft replica group per rank (group size 1), a Lighthouse on rank 0, each group's
    TCPStore on its own host: the smallest real torchft set-up."""
    import socket
    from datetime import timedelta
    import torch.distributed as dist
    from torchft import Manager, ProcessGroupGloo
    from torchft._torchft import LighthouseServer
    from torchft.local_sgd import DiLoCo, LocalSGD
    dist.init_process_group("gloo")  # only to hand out the Lighthouse's address and for barriers
    fam = Family()
    fam.rank, fam.size = dist.get_rank(), dist.get_world_size()
    fam.barrier = dist.barrier
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=fam.size) if fam.rank == 0 else None
    box = [lighthouse.address() if lighthouse else None]
    dist.broadcast_object_list(box, src=0)
    host = socket.gethostname()
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False)
    long = timedelta(seconds=args.launch_timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=long), min_replica_size=fam.size,
                      load_state_dict=lambda s: (model.load_state_dict(s["model"]), inner.load_state_dict(s["opt"])),
                      state_dict=lambda: {"model": model.state_dict(), "opt": inner.state_dict()},
                      use_async_quorum=False, timeout=long, quorum_timeout=long, rank=0, world_size=1,
                      store_addr=host, store_port=store.port, lighthouse_addr=box[0],
                      replica_id="tta%d" % fam.rank, hostname=host, init_sync=False)
    # The first quorum configures torchft's process group (connections), as init_process_group
    # does for the others before their clock starts: take it now, with one tiny allreduce.
    manager.start_quorum()
    manager.allreduce(torch.zeros(1)).wait()
    manager.should_commit()
    if args.worker == "torchft-localsgd":
        wrapper = LocalSGD(manager, model, inner, sync_every=args.sync_every)
    else:
        outer = torch.optim.SGD(model.parameters(), lr=args.outer_lr, momentum=0.9, nesterov=True)
        wrapper = DiLoCo(manager, [model], inner, outer, sync_every=args.sync_every)
    wrapper.__enter__()
    fam.keep = (lighthouse, store, manager, wrapper)  # the Lighthouse and store live as long as the job

    def finish():
        wrapper.__exit__(None, None, None)
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)  # the Manager's and Lighthouse's threads need not be joined

    fam.finish = finish
    return fam, model, inner


def dadt_family(torch, args, model, inner):
    import dadt.torch as dadt
    dadt.init()
    fam = Family()
    fam.rank, fam.size = dadt.rank(), dadt.size()
    fam.barrier = dadt.barrier
    H, kind = args.sync_every, args.worker
    named = model.named_parameters()
    if kind in ("sync", "async", "dear"):
        opt = dadt.DistributedOptimizer(inner, named_parameters=named, mode=kind, model=model)
    elif kind == "sync-powersgd":
        start = 1000 if args.powersgd_start_iter is None else args.powersgd_start_iter
        opt = dadt.DistributedOptimizer(inner, named_parameters=named, compression=dadt.Compression.powersgd(
            rank=args.powersgd_rank, start_iter=start))
    elif kind.startswith(("local_sgd", "diloco")):
        streaming = kind in STREAMING
        mode = "local_sgd" if kind.startswith("local_sgd") else "diloco"
        extra = {}
        if mode == "diloco":
            extra["outer_optimizer"] = torch.optim.SGD(model.parameters(), lr=args.outer_lr, momentum=0.9,
                                                       nesterov=True)
        opt = dadt.DistributedOptimizer(inner, named_parameters=named, mode=mode, sync_every=H,
                                        fragments=4 if streaming else 1,
                                        fragment_sync_delay=1 if streaming else 0,
                                        compression=dadt.Compression.int8 if kind.endswith("-int8")
                                        else dadt.Compression.none, **extra)
    elif kind.startswith("gossip"):
        opt = dadt.DistributedOptimizer(inner, named_parameters=named, mode="gossip",
                                        algorithm="sgp" if kind == "gossip-sgp" else None)
    else:
        opt = dadt.DistributedOptimizer(inner, named_parameters=named, mode="easgd", sync_every=H,
                                        asynchronous=kind == "easgd-async")
    dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    if kind in PERIODIC and hasattr(opt, "bytes_sent"):
        fam.bytes_sent = lambda: opt.bytes_sent

    def flush():
        opt.flush()
        return True

    fam.flush = flush
    # dear applies each bucket's update in the next forward: rank 0's weights between steps lack
    # part of the last update, and its flush() applies it, which the next forward would do anyway.
    fam.eval_flush = kind == "dear"
    fam.finish = dadt.shutdown
    return fam, model, opt


def worker(args):
    born = time.perf_counter()
    import sysconfig
    import torch
    torch.set_num_threads(1)
    model = build_model(torch, args)
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    make = {"torch": torch_family, "torchft": torchft_family, "dadt": dadt_family}[CONTENDERS[args.worker][0]]
    fam, net, opt = make(torch, args, model, inner)
    # Data (after init: the rank is known).
    root = sysconfig.get_paths()["stdlib"]
    train, val = split_modules(stdlib_modules(root), args.val_fraction)
    mine = rank_files(train, fam.rank, fam.size)
    stream = torch.frombuffer(bytearray(read_stream(root, mine)), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(args.seed * 1009 + fam.rank)
    span = args.context + 1

    def batch():
        starts = torch.randint(0, stream.numel() - span, (args.batch,), generator=gen)
        return torch.stack([stream[s:s + span] for s in starts.tolist()])

    per_step = args.batch * fam.size
    points, snaps = [], []
    paused = 0.0

    def snapshot(step, wall, tag="step"):
        if fam.rank == 0:
            snaps.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            points.append({"step": step, "samples": step * per_step, "wall_s": wall, "tag": tag})

    fam.barrier()
    started = time.perf_counter()
    startup = started - born
    snapshot(0, 0.0)
    for step in range(1, args.steps + 1):
        loss = lm_loss(torch, net, batch())
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % args.eval_every == 0:
            if fam.eval_flush:
                fam.flush()  # counted: dear's deferred updates, the same maths as before the next forward
            t = time.perf_counter()
            snapshot(step, t - started - paused)
            paused += time.perf_counter() - t
    t = time.perf_counter()
    if fam.flush():
        snapshot(args.steps, time.perf_counter() - started - paused, tag="flush")
    total = time.perf_counter() - started - paused
    sent = fam.bytes_sent() if fam.bytes_sent else None
    # Evaluate rank 0's copies on the fixed validation windows (no clock runs now).
    if fam.rank == 0:
        vstream = read_stream(root, val)
        vbytes = torch.frombuffer(bytearray(vstream), dtype=torch.uint8).long()
        windows = torch.stack([vbytes[o:o + span] for o in val_offsets(vbytes.numel(), args.val_windows, span)])
        evaluated = build_model(torch, args)
        with torch.no_grad():
            for point, snap in zip(points, snaps):
                evaluated.load_state_dict(snap)
                losses = [lm_loss(torch, evaluated, windows[i:i + 32]).item() * len(windows[i:i + 32])
                          for i in range(0, len(windows), 32)]
                point["val_loss"] = sum(losses) / len(windows)
        params = sum(p.numel() for p in model.parameters())
        shapes = [list(p.shape) for p in model.parameters()]
        result = {"contender": args.worker, "lr": args.lr, "size": fam.size, "steps": args.steps,
                  "samples": args.steps * per_step, "points": points, "final_loss": points[-1]["val_loss"],
                  "wall_s": total, "startup_s": startup, "params": params, "shapes": shapes,
                  "train_files": len(train), "val_files": len(val), "train_bytes_rank0": stream.numel(),
                  "val_bytes": vbytes.numel(), "payload_bytes_sent": sent}
        print("RESULT " + json.dumps(result), flush=True)
    fam.barrier()
    fam.finish()


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def worker_command(args, name, lr, steps, eval_every):
    from allreduce_bench import find_dadtrun  # same folder
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("time_to_accuracy: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    hosts = ["-H", args.hosts] if args.hosts else []
    hosts += ["--network-interface", args.network_interface] if args.network_interface else []
    tail = ["--worker", name, "--lr", repr(lr), "--steps", str(steps), "--eval-every", str(eval_every)]
    for key in ("batch", "context", "d_model", "layers", "heads", "d_ff", "sync_every", "post_local_warmup",
                "outer_lr", "val_fraction", "val_windows", "seed", "launch_timeout", "powersgd_start_iter",
                "powersgd_rank"):
        value = getattr(args, key)
        if value is not None:
            tail += ["--" + key.replace("_", "-"), str(value)]
    return [dadtrun, "--gloo", "-np", str(args.np), *hosts, *args.dadtrun_args.split(), sys.executable,
            os.path.abspath(__file__)] + tail


def launch(args, name, lr, steps, eval_every):
    """One launch; its result, or {"error": why} (a failing contender becomes an n/a row)."""
    from allreduce_bench import worker_environment
    cmd = worker_command(args, name, lr, steps, eval_every)
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=worker_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.launch_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # our own launcher's process group
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return {"error": "no result within %d s" % args.launch_timeout, "tail": out[-2000:]}
    for line in out.splitlines():
        m = re.search(r"RESULT (\{.*\})$", line)
        if m:
            result = json.loads(m.group(1))
            result["launch_s"] = time.perf_counter() - t0
            return result
    lines = [l for l in out.splitlines() if l.strip()]
    why = next((l for l in reversed(lines) if re.search(r"Error|error:|Exception", l)), lines[-1] if lines else "")
    print("time_to_accuracy: %s failed (exit %s): %s" % (name, proc.returncode, why), file=sys.stderr, flush=True)
    return {"error": "exit %s: %s" % (proc.returncode, why.strip()[-300:]), "tail": out[-4000:]}


def save(args, saved):
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(saved, f, indent=1)
        os.replace(tmp, args.json)


def tune(args, saved):
    steps, eval_every = budget(args.tune_samples or max(1, args.samples // 4), args.eval_samples, args.batch,
                               args.np, args.sync_every)
    eval_every = steps  # only the final loss counts
    print("tuning: %d steps (%d samples) per launch, learning rates %s" % (
        steps, steps * args.batch * args.np, ", ".join("%g" % x for x in args.tune_grid)), file=sys.stderr)
    trials = saved.setdefault("tuning", {})
    for name in args.names:
        for lr in args.tune_grid:
            r = launch(args, name, lr, steps, eval_every)
            trials.setdefault(name, []).append({"lr": lr, "final_loss": r.get("final_loss"),
                                                "error": r.get("error")})
            save(args, saved)
    return chosen_lrs(trials)


def chosen_lrs(trials):
    """name -> the learning rate whose tuning launch ended with the lowest validation loss."""
    out = {}
    for name, runs in trials.items():
        ok = [t for t in runs if t.get("final_loss") is not None and math.isfinite(t["final_loss"])]
        if ok:
            out[name] = min(ok, key=lambda t: t["final_loss"])["lr"]
    return out


def print_tuning(trials, chosen):
    if not trials:
        return
    grid = sorted({t["lr"] for runs in trials.values() for t in runs})
    print("\nLearning rates (AdamW; each tried once on the tuning budget; final validation loss):\n")
    print("| contender | " + " | ".join("lr %g" % g for g in grid) + " | chosen |")
    print("| --- |" + " ---: |" * (len(grid) + 1))
    for name, runs in trials.items():
        by = {t["lr"]: t for t in runs}
        cells = []
        for g in grid:
            t = by.get(g)
            cells.append("-" if t is None else ("failed" if t.get("final_loss") is None else "%.3f" % t["final_loss"]))
        print("| %s | %s | %s |" % (name, " | ".join(cells), "%g" % chosen[name] if name in chosen else "n/a"))


def time_to_target(points, target):
    """Seconds until the validation loss first reaches `target`, linear between evaluation points
    (in wall-time order); None if it never does."""
    pts = sorted(points, key=lambda p: p["wall_s"])
    prev = None
    for p in pts:
        if p["val_loss"] <= target:
            if prev is None or prev["val_loss"] == p["val_loss"]:
                return p["wall_s"]
            frac = (prev["val_loss"] - target) / (prev["val_loss"] - p["val_loss"])
            return prev["wall_s"] + frac * (p["wall_s"] - prev["wall_s"])
        prev = p
    return None


def wire_bytes(result, args):
    """(bytes per rank per step, how): measured where the launch reported its payload."""
    n, steps = result["size"], result["steps"]
    if result.get("payload_bytes_sent"):
        return result["payload_bytes_sent"] * ring(n) / steps, "measured"
    return computed_bytes(result["contender"], result["params"], result["shapes"], n, steps, args), "computed"


def at_budget(result, key, budget_samples):
    """A run's final `key` ("val_loss" or "wall_s"), or, for a run trained past the budget
    (--overrun), its value at the budget's evaluation point."""
    if budget_samples is None or result["samples"] <= budget_samples:
        return result["final_loss"] if key == "val_loss" else result["wall_s"]
    for p in result["points"]:
        if p.get("tag", "step") == "step" and p["samples"] == budget_samples:
            return p[key]
    return loss_at(result["points"], budget_samples) if key == "val_loss" else None


def loss_at(points, samples):
    """The validation loss of a run at `samples`, linear between its evaluation points (by samples)."""
    pts = sorted((p for p in points if p.get("tag", "step") == "step"), key=lambda p: p["samples"])
    for a, b in zip(pts, pts[1:]):
        if a["samples"] <= samples <= b["samples"]:
            return a["val_loss"] + (b["val_loss"] - a["val_loss"]) * (samples - a["samples"]) / (b["samples"] - a["samples"])
    return pts[-1]["val_loss"] if pts and samples >= pts[-1]["samples"] else None


def targets_of(runs, fractions):
    """[(fraction, loss)]: DDP's loss after that fraction of the budget, the median over rounds (at
    the whole budget its final loss)."""
    ddp = [r["ddp"] for r in runs if "final_loss" in r.get("ddp", {})]
    if not ddp:
        return []
    out = []
    for f in fractions:
        losses = [x["final_loss"] if f == 1 else loss_at(x["points"], f * x["samples"]) for x in ddp]
        out.append((f, statistics.median(losses)))
    return out


def summarize(runs, names, args):
    """(targets, rows): per contender the figures of the tables, over the rounds that have them;
    row["times"][k] and row["vs_<ref>"][k] belong to targets[k]."""
    targets = targets_of(runs, getattr(args, "target_fractions", [1.0]))
    tol = getattr(args, "target_tolerance", 0.0)
    rows = {}
    for name in names:
        ok = [r[name] for r in runs if "final_loss" in r.get(name, {})]
        errors = [r[name]["error"] for r in runs if "error" in r.get(name, {})]
        row = {"runs": len(ok), "errors": errors, "times": [], **{"vs_" + ref: [] for ref in REFERENCES}}
        rows[name] = row
        if not ok:
            continue
        budget = getattr(args, "budget_samples", None)
        row.update(lr=ok[0]["lr"], final=[at_budget(x, "val_loss", budget) for x in ok],
                   wall=[at_budget(x, "wall_s", budget) for x in ok], bytes=wire_bytes(ok[0], args))
        for _, loss in targets:
            goal = loss + tol
            row["times"].append([t for t in (time_to_target(x["points"], goal) for x in ok) if t is not None])
            for ref in REFERENCES:
                ratios = []
                for r in runs:
                    mine, theirs = r.get(name, {}), r.get(ref, {})
                    if "points" in mine and "points" in theirs:
                        a, b = time_to_target(mine["points"], goal), time_to_target(theirs["points"], goal)
                        if a is not None and b:
                            ratios.append(a / b)
                row["vs_" + ref].append(ratios)
    return targets, rows


def spread(v, fmt="%.1f"):
    return (fmt + " .. " + fmt) % (min(v), max(v))


def ratio_cell(v):
    return "%.2fx (%.2f .. %.2f)" % (statistics.median(v), min(v), max(v)) if v else "-"


def time_cells(row, k):
    """(median, min .. max) of the time to target k, or why there is none."""
    times = row["times"][k]
    if len(times) == row["runs"]:
        return "%.1f" % statistics.median(times), spread(times)
    if times:
        return "reached in %d/%d" % (len(times), row["runs"]), spread(times)
    return "not reached", "-"


def report(args, saved):
    runs = saved["runs"]
    args.budget_samples = saved.get("budget_samples")
    names = [n for n in saved["args"]["names"] if any(n in r for r in runs)]
    if not runs:
        return
    targets, rows = summarize(runs, names, args)
    first = next((x for r in runs for x in r.values() if "params" in x), None)
    a = saved["args"]
    print("\n### Time to accuracy: %d ranks on %s, link %s, %d round(s)" % (
        a["np"], a["hosts"] or "one host", a["link"] or "unshaped", len(runs)))
    if first:
        print("byte-level LM on the stdlib (%d training / %d validation modules, %.1f MB of validation text, "
              "%d windows of %d bytes); transformer %dx%d, %.2fM parameters (%.1f MB fp32); batch %d windows per "
              "rank; %d steps = %d samples; evaluation every %d steps; H = %d" % (
                  first["train_files"], first["val_files"], first["val_bytes"] / 1e6, a["val_windows"],
                  a["context"], a["layers"], a["d_model"], first["params"] / 1e6, first["params"] * 4 / 1e6,
                  a["batch"], first["steps"], first["samples"], saved.get("eval_every", 0), a["sync_every"]))
    if a.get("overrun", 1.0) != 1.0:
        longer = saved.get("overrun_contenders", PERIODIC)  # a run saved before PowerSGD's rows: PERIODIC
        print("the periodic contenders (%s) trained %gx the budget; their final loss and wall are read at the "
              "budget" % (", ".join(n for n in names if n in longer), a["overrun"]))
    refs = [ref for ref in REFERENCES if ref in names]  # a ratio column per reference that ran
    tol = getattr(args, "target_tolerance", 0.0)
    if not targets:
        print("no target: no DDP launch finished")
    for k, (frac, loss) in enumerate(targets):
        print("\ntarget %s: %.4f + %g (DDP's validation loss, nats per byte, %s, median over rounds)\n" % (
            "ABCDEFGH"[k], loss, tol, "at the whole budget" if frac == 1 else "after %g of the budget" % frac))
        head = "| contender | lr | time to target %s, s (median) | min .. max | %s" % (
            "ABCDEFGH"[k], "".join("vs %s | " % ref for ref in refs))
        tail = 4 if k == 0 else 0  # final loss, its min .. max, wall at budget, MB/rank/step
        if k == 0:
            print(head + "final val loss (median) | min .. max | wall at budget, s | MB/rank/step |")
        else:
            print(head.rstrip())
        print("| --- |" + " ---: |" * (3 + len(refs) + tail))
        for name in names:
            row = rows[name]
            if not row["runs"]:
                why = row["errors"][0] if row["errors"] else "not run"
                print("| %s | n/a (%s) |%s" % (name, why.replace("|", "/")[:160], " |" * (2 + len(refs) + tail)))
                continue
            ttt, rng = time_cells(row, k)
            cells = [name, "%g" % row["lr"], ttt, rng] + [ratio_cell(row["vs_" + ref][k]) for ref in refs]
            if k == 0:
                mb, how = row["bytes"]
                cells += ["%.4f" % statistics.median(row["final"]), spread(row["final"], "%.4f"),
                          "%.1f" % statistics.median(row["wall"]), "%.2f (%s)" % (mb / 1e6, how)]
            print("| " + " | ".join(cells) + " |")
    failed = {n: rows[n]["errors"] for n in names if rows[n]["errors"] and rows[n]["runs"]}
    for n, errs in failed.items():
        print("\n%s failed in %d round(s): %s" % (n, len(errs), errs[0]))
    lrs = ("tuned per contender with --tune (table above)" if saved.get("tuning") else "tuned with --tune in "
           "%s" % a["lrs_from"] if a.get("lrs_from") else "%g for every contender" % a["lr"])
    print("\nNotes: time to target and wall exclude startup and evaluation; a target is reached at the first loss "
          "within the tolerance of it, interpolated between evaluation points. Ratios are per round (the "
          "contender's time to target / the reference's in the same round; < 1 is faster): median (min .. max).\n"
          "The model evaluated is rank 0's own, copied every %d steps (multiples of H); dadt's modes and "
          "post-local-sgd add a point after a final exchange (flush(); its time includes it), dear flushes its "
          "deferred updates before each copy; the final loss is the last point's.\n"
          "MB/rank/step: 'measured' is the optimizer's bytes_sent (payload, final flush included) x 2(n-1)/n; "
          "'computed' is model bytes x fraction x frequency x 2(n-1)/n (ring allreduce).\n"
          "Learning rates (AdamW; DiLoCo's outer SGD lr %g, Nesterov 0.9): %s.%s" % (
              saved.get("eval_every", 0), a["outer_lr"], lrs,
              "" if not set(POWERSGD) & set(names) else
              " PowerSGD (rank %d) compresses from step %d (start_powerSGD_iter, start_iter)." % (
                  a.get("powersgd_rank", 4), 1000 if a.get("powersgd_start_iter") is None else a["powersgd_start_iter"])))


def plot(args, saved):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs, names = saved["runs"], saved["args"]["names"]
    fig, ax = plt.subplots(figsize=(10, 6))
    cmap = plt.get_cmap("tab20")
    for i, name in enumerate(names):
        first = True
        for r in runs:
            x = r.get(name, {})
            if "points" not in x:
                continue
            pts = sorted(x["points"], key=lambda p: p["wall_s"])
            ax.plot([p["wall_s"] for p in pts], [p["val_loss"] for p in pts], color=cmap(i % 20),
                    marker=".", linewidth=1, alpha=0.85, label=name if first else None,
                    linestyle="--" if CONTENDERS[name][0] != "dadt" else "-")
            first = False
    for k, (frac, loss) in enumerate(targets_of(runs, getattr(args, "target_fractions", [1.0]))):
        ax.axhline(loss, color="gray", linewidth=0.8, linestyle=":" if k == 0 else "-.",
                   label="target %s (DDP at %g of the budget)" % ("ABCDEFGH"[k], frac))
    a = saved["args"]
    ax.set_xlabel("wall time, s (startup and evaluation excluded)")
    ax.set_ylabel("validation loss, nats per byte")
    ax.set_title("stdlib byte LM, %d ranks on %s, link %s (dashed: torch/torchft; every round)" % (
        a["np"], a["hosts"] or "one host", a["link"] or "unshaped"))
    losses = [p["val_loss"] for r in runs for x in r.values() if "points" in x for p in x["points"]]
    if losses:
        ax.set_ylim(min(losses) - 0.05, min(max(losses), min(losses) + 2.0))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print("plot: %s" % args.plot, file=sys.stderr)


def from_json(args):
    try:
        with open(args.from_json) as f:
            saved = json.load(f)
        if not isinstance(saved, dict) or not {"args", "runs"} <= set(saved):
            raise ValueError("no 'args' and 'runs' at the top")
    except (OSError, ValueError) as e:
        sys.exit("time_to_accuracy: cannot read %s (%s: %s); --from-json takes a file written by --json"
                 % (args.from_json, type(e).__name__, e))
    for key, value in saved["args"].items():  # the figures of the saved run, not today's defaults
        if key not in ("from_json", "plot", "json", "targets", "target_fractions", "target_tolerance"):
            setattr(args, key, value)
    if saved.get("tuning"):
        print_tuning(saved["tuning"], chosen_lrs(saved["tuning"]))
    report(args, saved)
    if args.plot:
        plot(args, saved)


def driver(args):
    if args.from_json:
        return from_json(args)
    steps, eval_every = budget(args.samples, args.eval_samples, args.batch, args.np, args.sync_every)
    saved = {"args": vars(args), "runs": [], "eval_every": eval_every,
             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": os.getloadavg()[:3]}
    print("time_to_accuracy: %d ranks on %s; link %s; %d steps of %d windows per rank (%d samples), evaluation "
          "every %d steps; H = %d; contenders: %s; %s; load %.2f on %d cores" % (
              args.np, args.hosts or "one host", args.link or "unshaped", steps, args.batch,
              steps * args.batch * args.np, eval_every, args.sync_every, ", ".join(args.names), saved["date"],
              os.getloadavg()[0], os.cpu_count()), file=sys.stderr, flush=True)
    lrs = {}
    if args.lrs_from:
        with open(args.lrs_from) as f:
            lrs = chosen_lrs(json.load(f).get("tuning", {}))
    if args.tune:
        lrs = tune(args, saved)
        print_tuning(saved["tuning"], lrs)
    saved["budget_samples"] = steps * args.batch * args.np
    saved["overrun_contenders"] = [n for n in args.names if n in OVERRUN]
    longer = eval_every * max(1, math.ceil(steps * args.overrun / eval_every))
    for r in range(args.rounds):
        order = args.names[r % len(args.names):] + args.names[:r % len(args.names)]
        print("round %d/%d: %s" % (r + 1, args.rounds, ", ".join(order)), file=sys.stderr, flush=True)
        saved["runs"].append({})
        for name in order:
            saved["runs"][-1][name] = launch(args, name, lrs.get(name, args.lr),
                                             longer if name in OVERRUN else steps, eval_every)
            save(args, saved)
    report(args, saved)
    if args.plot and saved["runs"]:
        plot(args, saved)


def main():
    args = parse_args()
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
