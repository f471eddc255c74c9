"""mode="hogwild" against mode="sync" on one host: training throughput and final accuracy of the
digits MLP of examples/pytorch/train_digits.py (64-128-10, SGD with momentum 0.9, batch 32 per
rank, the same data split and shards).

Driver (a plain script): launches itself under dadtrun once per mode per round, the two modes
alternating and their order rotated every round, and prints a markdown table:

    python examples/benchmarks/hogwild_bench.py                     # 2 ranks, 5 rounds, 30 epochs
    python examples/benchmarks/hogwild_bench.py --np 4 --rounds 3 --epochs 10

Worker (what the driver launches; rank 0 prints one RESULT line of JSON):

    dadtrun --gloo -np 2 python examples/benchmarks/hogwild_bench.py --worker --mode hogwild

Learning rate as in train_digits.py: --lr x size() in sync (one update of the averaged gradient
of size() batches per step), --lr in hogwild (size() updates of one batch each per step time).
Timed: from a barrier after the set-up (optimizer built, parameters broadcast) to the barrier
after the last step and flush(), on rank 0; samples/s = every rank's samples / that time. No
evaluation inside the timed part; the final accuracy is over the whole test set after flush().
"""
import argparse
import json
import os
import statistics
import sys
import time

from allreduce_bench import find_dadtrun, worker_environment  # same folder
from peers import run_launch  # noqa: E402

MODES = ["sync", "hogwild"]
EXAMPLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="ranks, all on this host (default 2)")
    p.add_argument("--rounds", type=int, default=5, help="launches per mode (default 5)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank (train_digits.py's)")
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--dadtrun", help="the launcher (default: $DADTRUN, dadtrun on PATH, bazel-bin)")
    p.add_argument("--json", metavar="FILE", help="driver: also write every sample as JSON")
    p.add_argument("--worker", action="store_true", help="run one mode (under dadtrun)")
    p.add_argument("--mode", choices=MODES, default="hogwild", help="worker: the mode")
    return p.parse_args(argv)


# ----------------------------------------------------------------------------------------------
# Worker
# ----------------------------------------------------------------------------------------------
def worker(args):
    import torch
    import torch.nn.functional as F

    import dadt.torch as dadt
    sys.path.insert(0, os.path.join(EXAMPLES, "pytorch"))
    from train_digits import load_data

    torch.set_num_threads(1)
    dadt.init()
    rank, size = dadt.rank(), dadt.size()
    x_train, x_test, y_train, y_test = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]
    torch.manual_seed(args.seed + rank)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    lr = args.lr if args.mode == "hogwild" else args.lr * size
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                    named_parameters=model.named_parameters(), mode=args.mode)
    dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    smallest_shard = len(x_train) // size
    steps = -(-smallest_shard // args.batch_size)
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    perms = [torch.randperm(len(x_shard), generator=gen) for _ in range(args.epochs)]

    dadt.barrier()
    start = time.perf_counter()
    samples = 0
    for perm in perms:
        for step in range(steps):
            idx = perm[step * args.batch_size:min((step + 1) * args.batch_size, smallest_shard)]
            opt.zero_grad()
            F.cross_entropy(model(x_shard[idx]), y_shard[idx]).backward()
            opt.step()
            samples += len(idx)
    opt.flush()
    dadt.barrier()
    elapsed = time.perf_counter() - start

    total = int(dadt.allreduce(torch.tensor([samples]), name="bench.samples", op=dadt.Sum).item())
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    if rank == 0:
        print("RESULT " + json.dumps({"mode": args.mode, "size": size, "seconds": elapsed,
                                      "samples_per_sec": total / elapsed, "accuracy": accuracy}),
              flush=True)
    dadt.shutdown()


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------
def launch(args, mode):
    dadtrun = find_dadtrun(args.dadtrun)
    if dadtrun is None:
        sys.exit("hogwild_bench: dadtrun not found (use --dadtrun, install dadt, or bazel build //dadtrun)")
    cmd = [dadtrun, "--gloo", "-np", str(args.np), sys.executable, os.path.abspath(__file__), "--worker",
           "--mode", mode, "--epochs", str(args.epochs), "--lr", str(args.lr),
           "--batch-size", str(args.batch_size), "--seed", str(args.seed)]
    return run_launch(cmd, worker_environment(), "hogwild_bench", "the %s launch" % mode)


def driver(args):
    runs = {m: [] for m in MODES}
    for r in range(args.rounds):
        print("round %d/%d" % (r + 1, args.rounds), file=sys.stderr, flush=True)
        for mode in MODES[r % 2:] + MODES[:r % 2]:  # sync first in even rounds, hogwild in odd
            runs[mode].append(launch(args, mode))
    rate = {m: [x["samples_per_sec"] for x in runs[m]] for m in MODES}
    acc = {m: [100 * x["accuracy"] for x in runs[m]] for m in MODES}
    print("digits MLP (64-128-10), %d ranks on one host, batch %d per rank, %d epochs, lr %g x size() "
          "(sync) / %g (hogwild); %d launches per mode, alternated; medians\n"
          % (args.np, args.batch_size, args.epochs, args.lr, args.lr, args.rounds))
    print("| mode | samples/s (median) | min .. max | vs sync (median of round ratios) "
          "| final accuracy % (median) | min .. max |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for mode in MODES:
        ratio = statistics.median(a / b for a, b in zip(rate[mode], rate["sync"]))
        print("| %s | %.0f | %.0f .. %.0f | %.2fx | %.2f | %.2f .. %.2f |" % (
            mode, statistics.median(rate[mode]), min(rate[mode]), max(rate[mode]), ratio,
            statistics.median(acc[mode]), min(acc[mode]), max(acc[mode])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "args": vars(args)}, f, indent=1)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
