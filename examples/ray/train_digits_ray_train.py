"""The digits example under Ray Train, with dadt as Ray Train's backend (dadt.ray.DadtConfig).

    python examples/ray/train_digits_ray_train.py                      # a local Ray instance, 2 workers
    python examples/ray/train_digits_ray_train.py --address auto --num-workers 4 -- --epochs 10

Ray Train starts the workers (ScalingConfig) and runs train_fn on each; DadtConfig's backend has set
every worker's DADT_* environment before, so train_digits.main's dadt.init() meets the others. Each
worker reports its final accuracy to Ray Train (rank 0 with a small checkpoint, since Ray Train keeps
the metrics of such reports); the driver prints rank 0's. dadt and this repository's
examples/ must be at the same path on every node.
"""
import argparse
import os
import sys
import tempfile

import ray
import ray.train
from ray.train import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from dadt.ray import DadtConfig

PYTORCH_EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pytorch")


def train_fn(config):
    """Runs on every Ray Train worker."""
    if PYTORCH_EXAMPLES not in sys.path:
        sys.path.insert(0, PYTORCH_EXAMPLES)
    import train_digits
    accuracy = train_digits.main(config["train_args"])
    # Ray Train V2 keeps the metrics of reports that carry a checkpoint: rank 0 sends one (a note of
    # the accuracy), every rank reports.
    rank = ray.train.get_context().get_world_rank()
    with tempfile.TemporaryDirectory() as note:
        checkpoint = None
        if rank == 0:
            with open(os.path.join(note, "accuracy.txt"), "w") as f:
                f.write("%.4f\n" % accuracy)
            checkpoint = ray.train.Checkpoint.from_directory(note)
        ray.train.report({"accuracy": accuracy, "rank": rank}, checkpoint=checkpoint)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=None, help="the Ray cluster (auto, HOST:6379); default: a local instance")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--storage-path", default=None, help="Ray Train's results (default: a temporary directory)")
    p.add_argument("train_args", nargs="*", help="train_digits.py's flags, after --")
    args = p.parse_args()

    ray.init(address=args.address)
    storage = args.storage_path or tempfile.mkdtemp(prefix="dadt-ray-train-")
    trainer = DataParallelTrainer(train_fn, train_loop_config={"train_args": args.train_args},
                                  backend_config=DadtConfig(timeout_s=60),
                                  scaling_config=ScalingConfig(num_workers=args.num_workers),
                                  run_config=RunConfig(name="dadt-digits", storage_path=storage))
    result = trainer.fit()
    print(f"final test accuracy (rank 0): {result.metrics['accuracy']:.4f}", flush=True)


if __name__ == "__main__":
    main()
