"""The digits example (examples/pytorch/train_digits.py) on a Ray cluster, with dadt.ray.RayExecutor.

    python examples/ray/train_digits_ray.py                        # a local Ray instance, 2 ranks
    ray start --head                                               # or a cluster: head ...
    ray start --address HEAD_IP:6379                               # ... and each other node
    python examples/ray/train_digits_ray.py --address auto --num-workers 4
    python examples/ray/train_digits_ray.py --address auto --num-hosts 2 --num-workers-per-host 2
    python examples/ray/train_digits_ray.py -- --epochs 10 --mode local_sgd   # after --: train_digits.py's flags

Each rank is a Ray actor that runs train_digits.main (which calls dadt.init(), trains its shard and
returns the test accuracy); the driver prints what rank 0 returned. dadt and this repository's
examples/ must be at the same path on every node (the actors import train_digits from there).
"""
import argparse
import os
import sys

import ray

from dadt.ray import RayExecutor

PYTORCH_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pytorch")


def train(argv):
    """Runs on every rank (a Ray actor)."""
    if PYTORCH_EXAMPLES not in sys.path:
        sys.path.insert(0, PYTORCH_EXAMPLES)
    import train_digits
    return train_digits.main(argv)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=None, help="the Ray cluster (auto, HOST:6379, ray://HOST:10001); "
                                                   "default: a local Ray instance")
    p.add_argument("--num-workers", type=int, default=None, help="ranks (default 2 without --num-hosts)")
    p.add_argument("--num-hosts", type=int, default=None, help="instead: this many distinct nodes ...")
    p.add_argument("--num-workers-per-host", type=int, default=None, help="... with this many ranks each")
    p.add_argument("--cpus-per-worker", type=float, default=1)
    p.add_argument("--timeout", type=int, default=60, help="seconds the ranks wait for each other at init")
    p.add_argument("train_args", nargs="*", help="train_digits.py's flags, after --")
    args = p.parse_args()
    if args.num_workers is None and args.num_hosts is None:
        args.num_workers = 2

    ray.init(address=args.address)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=args.timeout), num_workers=args.num_workers,
                           num_hosts=args.num_hosts, num_workers_per_host=args.num_workers_per_host,
                           cpus_per_worker=args.cpus_per_worker)
    executor.start()
    try:
        accuracies = executor.run(train, args=[args.train_args])
    finally:
        executor.shutdown()
    print(f"ranks: {len(accuracies)}; final test accuracy (rank 0): {accuracies[0]:.4f}", flush=True)


if __name__ == "__main__":
    main()
