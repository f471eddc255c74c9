"""Data-parallel training of a small MLP on scikit-learn's bundled digits data set (no download).

    dadtrun --gloo -np 2 python examples/pytorch/train_digits.py          # or -np 1, 4, ...
    dadtrun --gloo -np 2 python examples/pytorch/train_digits.py --mode async   # or dear
    dadtrun --gloo -np 2 python examples/pytorch/train_digits.py --mode diloco --sync-every 8
                                                       # or local_sgd, easgd (modes that send less)
    dadtrun --gloo -np 2 python examples/pytorch/train_digits.py --compression powersgd --powersgd-rank 2

Every rank trains on its own shard of the training set (rows rank::size); DistributedOptimizer
averages the gradients, so all ranks hold the same weights after every step (in the modes that send
less, every --sync-every steps and after the final flush). Rank 0 prints one line per epoch and, at
the end, the accuracy over the whole test set:

    epoch 30 loss 0.0123 accuracy 0.9722
    final test accuracy: 0.9722
"""
import argparse
import math

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import dadt.torch as dadt


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank; scaled by size() (not in mode hogwild)")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--mode", choices=list(dadt.training_modes.MODES), default="sync",
                   help="DistributedOptimizer training mode (docs/training-modes.md)")
    p.add_argument("--sync-every", type=int, default=8,
                   help="local_sgd, diloco, easgd: steps between two exchanges of the model")
    p.add_argument("--compression", choices=["none", "fp16", "bf16", "int8", "powersgd"], default="none",
                   help="what the gradients (diloco: the pseudo-gradient) travel as; powersgd: "
                        "rank-R factors of each weight matrix (mode sync)")
    p.add_argument("--powersgd-rank", type=int, default=2, help="PowerSGD's rank R (default 2)")
    p.add_argument("--powersgd-start-iter", type=int, default=20,
                   help="PowerSGD: plain allreduces for the first steps (default 20, about one epoch at 2 ranks)")
    p.add_argument("--lr-step-epochs", type=int, default=0,
                   help="halve the learning rate every this many epochs (0: constant)")
    return p.parse_args(argv)


def compression(args):
    if args.compression == "powersgd":
        return dadt.Compression.powersgd(rank=args.powersgd_rank, start_iter=args.powersgd_start_iter)
    return getattr(dadt.Compression, args.compression)


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0  # pixels are 0..16
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return x_train, x_test, y_train, y_test


def main(argv=None):
    """Trains with the flags in ``argv`` (None: the command line); returns the final test accuracy
    (every rank computes it; rank 0 prints it). examples/ray/train_digits_ray.py calls this on each
    Ray worker."""
    args = parse_args(argv)
    torch.set_num_threads(1)
    dadt.init()
    rank, size = dadt.rank(), dadt.size()

    x_train, x_test, y_train, y_test = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]
    x_test_shard, y_test_shard = x_test[rank::size], y_test[rank::size]

    # Different initialisation on every rank on purpose: broadcast_parameters makes them equal.
    torch.manual_seed(args.seed + rank)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    # hogwild: every rank steps the same weights with its own batch, so n ranks already make n
    # updates per step time; the averaged-gradient modes make one, of an n-times larger batch.
    lr = args.lr if args.mode == "hogwild" else args.lr * size
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    knobs = {"sync_every": args.sync_every} if args.mode in dadt.training_modes.PERIODIC_MODES else {}
    opt = dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), mode=args.mode, model=model,
                                    compression=compression(args), **knobs)
    schedule = torch.optim.lr_scheduler.StepLR(opt, args.lr_step_epochs, gamma=0.5) if args.lr_step_epochs else None
    dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    dadt.broadcast_optimizer_state(opt, root_rank=0)

    # Every rank must take the same number of steps (each step is an allreduce on every rank):
    # shards differ by at most one row, so use the smallest shard's batch count everywhere.
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

        if schedule is not None:
            schedule.step()
        # Mean training loss over all ranks, and test accuracy counted on each rank's test shard.
        loss = dadt.allreduce(torch.tensor([total_loss / steps]), name="epoch.loss", op=dadt.Average)
        model.eval()
        with torch.no_grad():
            correct = (model(x_test_shard).argmax(dim=1) == y_test_shard).sum()
        counts = dadt.allreduce(torch.tensor([int(correct), len(y_test_shard)]), name="epoch.accuracy", op=dadt.Sum)
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f} accuracy {counts[0].item() / counts[1].item():.4f}",
                  flush=True)

    # async: apply the last step's pending average; dear: complete the deferred updates; the modes
    # that send less: the exchanges in flight, then one last exchange of the whole model.
    opt.flush()
    # All ranks hold the same weights; rank 0 evaluates the whole test set.
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    if rank == 0:
        print(f"final test accuracy: {accuracy:.4f}", flush=True)
    dadt.shutdown()
    return accuracy


if __name__ == "__main__":
    main()
