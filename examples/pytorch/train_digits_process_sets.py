"""Process sets: half of the ranks train on scikit-learn's digits while the other half, at the same
time, run collectives of their own (docs/api.md, "Process sets").

    dadtrun --gloo -np 4 python examples/pytorch/train_digits_process_sets.py

Ranks [0, size/2) form the set "trainers": DistributedOptimizer(process_set=trainers) averages the
gradients over them only, and broadcast_parameters / allreduce of the metrics run on that set.
The other ranks form "others" and meanwhile reduce tensors among themselves, checking each
result. Rank 0 prints one line per epoch and the final accuracy; the first of the others prints
how many of its collectives it checked:

    epoch 30 loss 0.0123 accuracy 0.9722
    final test accuracy: 0.9722
    others [2, 3]: 30 allreduces checked
"""
import argparse
import math

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import dadt.torch as dadt


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args()


def train(args, trainers):
    """Data-parallel training over the ranks of `trainers`; returns the final test accuracy."""
    rank, size = trainers.rank(), trainers.size()  # this rank's place in the set, its size
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2,
                                                        random_state=args.seed, stratify=y)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    torch.manual_seed(args.seed + rank)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    opt = dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                    process_set=trainers)
    root = trainers.ranks[0]  # a global rank, the set's first
    dadt.broadcast_parameters(model.state_dict(), root_rank=root, process_set=trainers)

    smallest_shard = len(x_train) // size
    steps = max(1, math.ceil(smallest_shard / args.batch_size))
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(len(x_shard), generator=gen)
        total_loss = 0.0
        for step in range(steps):
            idx = perm[step * args.batch_size:min((step + 1) * args.batch_size, smallest_shard)]
            opt.zero_grad()
            loss = F.cross_entropy(model(x_shard[idx]), y_shard[idx])
            loss.backward()
            opt.step()
            total_loss += loss.item()
        loss = dadt.allreduce(torch.tensor([total_loss / steps]), name="epoch.loss",
                              process_set=trainers)
        model.eval()
        with torch.no_grad():
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        if dadt.rank() == 0:
            print(f"epoch {epoch} loss {loss.item():.4f} accuracy {accuracy:.4f}", flush=True)
    return accuracy


def reduce_among(others, rounds):
    """The other ranks' own work: `rounds` allreduces over their set, each result checked."""
    for i in range(rounds):
        got = dadt.allreduce(torch.full((1000,), float(dadt.rank() + i)), name="epoch.loss",
                             op=dadt.Sum, process_set=others)  # the trainers' name: no clash
        want = float(sum(r + i for r in others.ranks))
        if not torch.all(got == want):
            raise RuntimeError("others: round %d got %s, expected %s" % (i, got[:3], want))
    return rounds


def main():
    args = parse_args()
    torch.set_num_threads(1)
    dadt.init()
    if dadt.size() < 2:
        raise SystemExit("run with 2 or more ranks: half train, the other half reduce")
    half = dadt.size() // 2
    trainers = dadt.add_process_set(list(range(half)))  # every rank adds both sets, in order
    others = dadt.add_process_set(list(range(half, dadt.size())))
    if trainers.included():
        accuracy = train(args, trainers)
        if dadt.rank() == 0:
            print(f"final test accuracy: {accuracy:.4f}", flush=True)
    else:
        checked = reduce_among(others, args.epochs)
        if dadt.rank() == others.ranks[0]:
            print(f"others {others.ranks}: {checked} allreduces checked", flush=True)
    dadt.barrier()  # every rank, before the sets go
    dadt.remove_process_set(others)
    dadt.remove_process_set(trainers)
    dadt.shutdown()


if __name__ == "__main__":
    main()
