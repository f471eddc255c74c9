"""A straggler: gossip (AD-PSGD, and SGP) against torch DDP and dadt's sync mode when one rank is
slower than the others.

    sudo HOSTS=4 RATE=1gbit examples/benchmarks/shaped_hosts.sh \\
        python3 examples/benchmarks/straggler_bench.py --hosts h1:1,h2:1,h3:1,h4:1 \\
        --network-interface dadt0 --link 1gbit --json /tmp/straggler.json
    python3 examples/benchmarks/straggler_bench.py --np 4 --seconds 20      # one host, a quick look

Task and model: time_to_accuracy.py's (a byte-level transformer on the standard library's own
source, AdamW), smaller by default (d_model 128, 2 layers: a step is tens of milliseconds).

The straggler sleeps: after each of its steps, rank --straggler-rank sleeps (factor - 1) times the
time that step took, so its steps take --factor times as long; every contender gets the same
slowdown. (Sleeping frees its CPU for the other ranks, which a CPU-limited straggler would not;
on this machine the ranks share two cores, so that is the kinder choice for the lock-step
contenders too.)

Each launch trains for --seconds of wall time. DDP and sync decide together when to stop (one
extra one-element allreduce per step, the same for both), since they step in lock; gossip's ranks
each stop on their own clock. samples/s is every rank's samples over the longest rank's training
time. For each contender the table gives samples/s without and with the straggler and the share
lost to it. Then, at equal samples: DDP is launched again (no straggler: its maths does not depend
on one) for exactly the samples gossip processed with the straggler, and the table compares
their final validation losses (gossip after flush(), which averages the ranks' models).

Rounds alternate the contenders; medians with min .. max over rounds.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import time_to_accuracy as tta  # noqa: E402  (same folder: the task, the model, the families)

CONTENDERS = ("ddp", "sync", "gossip", "gossip-sgp")
# Stop together (every rank takes the same steps): the synchronous ones, and SGP, whose ranks wait
# for their in-neighbours' pushes.
LOCKSTEP = ("ddp", "sync", "gossip-sgp")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=None, help="ranks (default: the slots of --hosts, else 4)")
    p.add_argument("--hosts", default=None, help="dadtrun host list, e.g. h1:1,h2:1,h3:1,h4:1")
    p.add_argument("--network-interface", default=None, help="dadt0 on netns hosts")
    p.add_argument("--dadtrun", default=None)
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=40.0, help="training time of each launch")
    p.add_argument("--straggler-rank", type=int, default=None, help="the slow rank (default: the last)")
    p.add_argument("--factor", type=float, default=3.0, help="how many times slower its steps are")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--lr", type=float, default=2e-3, help="AdamW learning rate of every contender")
    p.add_argument("--lrs", default="", help="per-contender learning rates, e.g. gossip=1e-3 (labelled)")
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--val-windows", type=int, default=96)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--link", default=None, help="the link's rate, for the header")
    p.add_argument("--launch-timeout", type=int, default=900)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--from-json", metavar="FILE", help="print the table of a saved run")
    p.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--slow", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.np is None:
        args.np = sum(int(h.split(":")[1]) if ":" in h else 1
                      for h in args.hosts.split(",")) if args.hosts else 4
    if args.straggler_rank is None:
        args.straggler_rank = args.np - 1
    # What time_to_accuracy's families read.
    args.sync_every, args.outer_lr, args.powersgd_start_iter, args.post_local_warmup = 1, 0.7, None, 0
    return args


# ----------------------------------------------------------------------------------------------
# Worker
# ----------------------------------------------------------------------------------------------
def worker(args):
    import sysconfig
    import torch
    torch.set_num_threads(1)
    model = tta.build_model(torch, args)
    inner = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    family = tta.torch_family if args.worker == "ddp" else tta.dadt_family
    fam, net, opt = family(torch, args, model, inner)
    if args.worker == "ddp":
        import torch.distributed as dist

        def total(values, maximum=False):
            t = torch.tensor(values, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX if maximum else dist.ReduceOp.SUM)
            return t.tolist()
    else:
        import dadt.torch as dadt

        def total(values, maximum=False):
            return dadt.allreduce(torch.tensor(values, dtype=torch.float64),
                                  op=dadt.Max if maximum else dadt.Sum,
                                  name="straggler.%s.%d" % ("max" if maximum else "sum", len(values))).tolist()
    root = sysconfig.get_paths()["stdlib"]
    train, val = tta.split_modules(tta.stdlib_modules(root), args.val_fraction)
    stream = torch.frombuffer(bytearray(tta.read_stream(root, tta.rank_files(train, fam.rank, fam.size))),
                              dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(args.seed * 1009 + fam.rank)
    span = args.context + 1
    slow = fam.rank == args.slow

    fam.barrier()
    started = time.perf_counter()
    steps = 0
    while True:
        t = time.perf_counter()
        starts = torch.randint(0, stream.numel() - span, (args.batch,), generator=gen)
        loss = tta.lm_loss(torch, net, torch.stack([stream[s:s + span] for s in starts.tolist()]))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if slow:
            time.sleep((args.factor - 1.0) * (time.perf_counter() - t))
        steps += 1
        elapsed = time.perf_counter() - started
        if args.steps:
            done = steps >= args.steps
        elif args.worker in LOCKSTEP:
            done = total([float(elapsed >= args.seconds)])[0] > 0
        else:
            done = elapsed >= args.seconds
        if done:
            break
    trained = time.perf_counter() - started
    fam.flush()  # gossip: withdraws what has no partner, then averages the models
    sums = total([float(steps), float(slow) * steps])
    longest = total([trained], maximum=True)[0]
    if fam.rank == 0:
        vbytes = torch.frombuffer(bytearray(tta.read_stream(root, val)), dtype=torch.uint8).long()
        windows = torch.stack([vbytes[o:o + span] for o in tta.val_offsets(vbytes.numel(), args.val_windows, span)])
        with torch.no_grad():
            losses = [tta.lm_loss(torch, model, windows[i:i + 32]).item() * len(windows[i:i + 32])
                      for i in range(0, len(windows), 32)]
        samples = sums[0] * args.batch
        result = {"contender": args.worker, "straggler": args.slow >= 0, "size": fam.size,
                  "steps_all_ranks": sums[0], "steps_of_straggler": sums[1], "samples": samples,
                  "train_s": longest, "samples_per_s": samples / longest,
                  "final_loss": sum(losses) / len(windows)}
        print("RESULT " + json.dumps(result), flush=True)
    fam.barrier()
    fam.finish()


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def launch(args, name, slow, steps=0):
    from allreduce_bench import find_dadtrun, worker_environment
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("straggler_bench: dadtrun not found (use --dadtrun, or install dadt)")
    hosts = ["-H", args.hosts] if args.hosts else []
    hosts += ["--network-interface", args.network_interface] if args.network_interface else []
    tail = ["--worker", name, "--slow", str(slow), "--steps", str(steps), "--lr", str(lr_of(args, name))]
    for key in ("seconds", "factor", "batch", "context", "d_model", "layers", "heads", "d_ff",
                "val_fraction", "val_windows", "seed", "np"):
        tail += ["--" + key.replace("_", "-"), str(getattr(args, key))]
    cmd = [dadtrun, "--gloo", "-np", str(args.np), *hosts, sys.executable, os.path.abspath(__file__)] + tail
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=worker_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.launch_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return {"contender": name, "error": "no result within %d s" % args.launch_timeout}
    for line in out.splitlines():
        m = re.search(r"RESULT (\{.*\})$", line)
        if m:
            return json.loads(m.group(1))
    return {"contender": name, "straggler": slow >= 0, "error": "exit %s: %s" % (proc.returncode, out[-600:])}


def lr_of(args, name):
    chosen = dict(kv.split("=") for kv in args.lrs.split(",") if kv)
    return float(chosen.get(name, args.lr))


def cell(values, fmt="%.1f"):
    if not values:
        return "n/a"
    return (fmt + " (" + fmt + " .. " + fmt + ")") % (statistics.median(values), min(values), max(values))


def table(runs, args):
    names = [n for n in CONTENDERS if any(r.get("contender") == n for r in runs)]
    link = (", link " + args.link) if args.link else ""
    given = getattr(args, "lrs", "")
    lrs = ", learning rates " + given + " (else %g)" % args.lr if given else ", AdamW lr %g" % args.lr
    print("\nStraggler: rank %d's steps %.1fx as long (it sleeps), %d ranks%s, %.0f s per launch, "
          "%d round(s)%s; median (min .. max)\n" % (args.straggler_rank, args.factor, args.np, link,
                                                     args.seconds, args.rounds, lrs))
    print("| contender | samples/s, no straggler | samples/s, straggler | lost to the straggler |")
    print("| --- | ---: | ---: | ---: |")
    for n in names:
        fast = [r["samples_per_s"] for r in runs if r.get("contender") == n and not r.get("straggler")
                and "error" not in r and not r.get("equal_samples")]
        slow = [r["samples_per_s"] for r in runs if r.get("contender") == n and r.get("straggler")
                and "error" not in r]
        lost = [100.0 * (1 - s / f) for f, s in zip(fast, slow)]
        print("| %s | %s | %s | %s%% |" % (n, cell(fast), cell(slow), cell(lost)))
    equal = [r for r in runs if r.get("equal_samples") and "error" not in r]
    if equal:
        print("\nFinal validation loss at equal samples (gossip with the straggler; DDP launched for "
              "the same samples):\n")
        print("| contender | samples | gossip's loss | DDP's loss | gossip / DDP |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for r in equal:
            print("| %s | %d | %.4f | %.4f | %.3f |" % (r["versus"], r["samples"], r["gossip_loss"],
                                                      r["final_loss"], r["gossip_loss"] / r["final_loss"]))


def main():
    args = parse_args()
    if args.worker:
        return worker(args)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        return table(saved["runs"], argparse.Namespace(**saved["args"]))
    names = args.contenders.split(",")
    for n in names:
        if n not in CONTENDERS:
            sys.exit("straggler_bench: unknown contender %r (%s)" % (n, ", ".join(CONTENDERS)))
    runs = []
    for _ in range(args.rounds):
        for n in names:
            for slow in (-1, args.straggler_rank):
                result = launch(args, n, slow)
                runs.append(result)
                print(json.dumps(result), file=sys.stderr, flush=True)
                if n.startswith("gossip") and slow >= 0 and "error" not in result and "ddp" in names:
                    steps = int(round(result["samples"] / (args.batch * args.np)))
                    ddp = launch(args, "ddp", -1, steps=steps)
                    ddp.update(equal_samples=True, versus=n, gossip_loss=result["final_loss"])
                    runs.append(ddp)
                    print(json.dumps(ddp), file=sys.stderr, flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    table(runs, args)


if __name__ == "__main__":
    main()
