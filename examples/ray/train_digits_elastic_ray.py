"""The elastic digits example (examples/elastic/train_digits_elastic.py) on a Ray cluster, with an elastic
dadt.ray.RayExecutor: the job goes on when a node dies (from its last commit, at the new size) and takes new
nodes as they join, up to --max-workers (docs/running.md, "Ray").

    ray start --head --num-cpus 1                                  # the head ...
    ray start --address HEAD_IP:6379 --num-cpus 1                  # ... and each other node
    python examples/ray/train_digits_elastic_ray.py --address auto --min-workers 1 --max-workers 4
    python examples/ray/train_digits_elastic_ray.py --address auto -- --epochs 30   # after --: the script's flags

Each rank is a Ray actor that runs train_digits_elastic.main (dadt.init(), a TorchState, its training
loop in dadt.elastic.run), one per cpus_per_worker CPUs of each live node. The driver prints the final
round's size and what its rank 0 returned. dadt and this repository's examples/ must be at the same path on
every node.
"""
import argparse
import os
import sys

import ray

from dadt.ray import RayExecutor

ELASTIC_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "elastic")


def train(argv):
    """Runs on every rank (a Ray actor); returns the test accuracy."""
    if ELASTIC_EXAMPLES not in sys.path:
        sys.path.insert(0, ELASTIC_EXAMPLES)
    import train_digits_elastic
    return train_digits_elastic.main(argv)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=None, help="the Ray cluster (auto, HOST:6379, ray://HOST:10001); "
                                                   "default: a local Ray instance")
    p.add_argument("--min-workers", type=int, default=1)
    p.add_argument("--max-workers", type=int, default=None, help="default: one per free slot of every node")
    p.add_argument("--cpus-per-worker", type=float, default=1)
    p.add_argument("--elastic-timeout", type=int, default=600,
                   help="seconds with fewer than --min-workers ranks before the job fails")
    p.add_argument("--timeout", type=int, default=60, help="seconds the ranks wait for each other at init")
    p.add_argument("train_args", nargs="*", help="train_digits_elastic.py's flags, after --")
    args = p.parse_args()

    ray.init(address=args.address)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=args.timeout), min_workers=args.min_workers,
                           max_workers=args.max_workers, cpus_per_worker=args.cpus_per_worker,
                           elastic_timeout=args.elastic_timeout)
    executor.start()
    try:
        accuracies = executor.run(train, args=[args.train_args])
    finally:
        executor.shutdown()
    print(f"ranks: {len(accuracies)}; final test accuracy (rank 0): {accuracies[0]:.4f}", flush=True)


if __name__ == "__main__":
    main()
