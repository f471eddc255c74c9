"""Data-parallel training of a small MLP on scikit-learn's digits with TensorFlow 2 and dadt.

    dadtrun --gloo -np 2 python examples/tensorflow/train_digits.py          # or -np 1, 3, ...
    dadtrun --gloo -np 2 python examples/tensorflow/train_digits.py --mode diloco --sync-every 8
                                                   # or local_sgd, easgd (modes that send less)

A custom training loop: the step is a tf.function; dadt.DistributedGradientTape averages the
gradients across ranks (one grouped allreduce per step) and dadt.broadcast_variables makes every
rank start from rank 0's weights and optimizer state. With --mode local_sgd, diloco or easgd the
tape is a plain one and the optimizer is dadt.keras.DistributedOptimizer(mode=...): each rank
steps on its own gradients, the model is exchanged every --sync-every steps and opt.flush() makes
the weights equal at the end. Rank 0 prints one line per epoch and the accuracy over the whole
test set:

    epoch 20 loss 0.0123 accuracy 0.9722
    final test accuracy: 0.9722
"""
import argparse
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import dadt.tensorflow as dadt  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank; scaled by size()")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--mode", choices=["sync", "local_sgd", "diloco", "easgd"], default="sync",
                   help="training mode (docs/frameworks.md, \"Modes that send less\")")
    p.add_argument("--sync-every", type=int, default=8,
                   help="local_sgd, diloco, easgd: steps between two exchanges of the model")
    return p.parse_args()


def load_data(seed):
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    dadt.init()
    rank, size = dadt.rank(), dadt.size()

    x_train, x_test, y_train, y_test = load_data(args.seed)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    # Different initialisation on every rank on purpose: broadcast_variables makes them equal.
    tf.random.set_seed(args.seed + rank)
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(128, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    opt = tf.keras.optimizers.SGD(learning_rate=args.lr * size, momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    sync = args.mode == "sync"
    if not sync:
        # Each rank applies its own gradients; the model is exchanged every --sync-every steps.
        # The modes start from the weights before the first step: they must be equal already.
        from dadt.keras import DistributedOptimizer
        opt = DistributedOptimizer(opt, mode=args.mode, sync_every=args.sync_every)
        dadt.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def train_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        if sync:
            tape = dadt.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if first_batch:  # the optimizer's variables exist after its first step
            if sync:
                dadt.broadcast_variables(model.variables, root_rank=0)
            dadt.broadcast_variables(opt.variables, root_rank=0)
        return loss

    # Every rank takes the same number of steps: the smallest shard's batch count.
    steps = max(1, math.ceil(len(x_train) // size / args.batch_size))
    rng = np.random.default_rng(args.seed * 1000 + rank)
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(x_shard))
        total = 0.0
        for step in range(steps):
            idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
            total += float(train_step(x_shard[idx], y_shard[idx], epoch == 1 and step == 0))
        loss = dadt.allreduce(tf.constant([total / steps]), name="epoch.loss", op=dadt.Average)
        correct = np.sum(np.argmax(model(x_test[rank::size]), axis=1) == y_test[rank::size])
        counts = dadt.allreduce(tf.constant([int(correct), len(y_test[rank::size])], tf.int64),
                                name="epoch.accuracy", op=dadt.Sum).numpy()
        if rank == 0:
            print(f"epoch {epoch} loss {float(loss[0]):.4f} accuracy {counts[0] / counts[1]:.4f}", flush=True)

    if not sync:  # the exchanges in flight, then one last one: equal weights everywhere
        opt.flush()
    accuracy = float(np.mean(np.argmax(model(x_test), axis=1) == y_test))
    if rank == 0:
        print(f"final test accuracy: {accuracy:.4f}", flush=True)
    dadt.shutdown()


if __name__ == "__main__":
    main()
