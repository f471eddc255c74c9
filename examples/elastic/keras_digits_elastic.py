"""Elastic Keras ``model.fit`` on scikit-learn's digits: KerasState and the elastic callbacks keep
the model, the optimizer, the epoch and the batch committed, so the job goes on from the last
commit when a worker dies (docs/elastic.md).

    dadtrun --gloo -np 3 --min-np 2 python examples/elastic/keras_digits_elastic.py
    dadtrun --gloo -np 3 --min-np 2 python examples/elastic/keras_digits_elastic.py --mode local_sgd

In a mode that sends less (--mode local_sgd, diloco or easgd) the state also holds the
optimizer's exchange state (the step count, the last synced weights), so a worker's death rolls
the model, the schedule and the synced weights back to the same commit; FlushCallback makes every
rank's weights equal at the end.

Rank 0 prints the final accuracy over the whole test set ("final test accuracy: 0.9611").
"""
import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import dadt.keras as dadt  # noqa: E402


class _Progress(keras.callbacks.Callback):
    """Tests: appends "epoch batch" per finished batch to a file, and sleeps a little."""

    def __init__(self, path, delay, state):
        super().__init__()
        self.path, self.delay, self.state = path, delay, state

    def on_batch_end(self, batch, logs=None):
        if self.path:
            with open(self.path, "a") as f:
                f.write("%d %d\n" % (self.state.epoch, batch))
        if self.delay:
            time.sleep(self.delay)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank; scaled by size()")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--batches-per-commit", type=int, default=5)
    p.add_argument("--progress-file", default=None)
    p.add_argument("--step-delay", type=float, default=0.0)
    p.add_argument("--mode", choices=["sync", "local_sgd", "diloco", "easgd"], default="sync")
    p.add_argument("--sync-every", type=int, default=8, help="local_sgd, diloco, easgd: steps between exchanges")
    p.add_argument("--streaming", action="store_true",
                   help="local_sgd, diloco: two fragments, each exchange overlapping the next step")
    args = p.parse_args()
    # sync averages the gradients of size() ranks: its learning rate grows with size(); the modes
    # that send less step on each rank's own gradients with one rank's.
    scale = dadt.size if args.mode == "sync" else (lambda: 1)

    dadt.init()
    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2,
                                                        random_state=42, stratify=digits.target)
    keras.utils.set_random_seed(42)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    knobs = {} if args.mode == "sync" else {"sync_every": args.sync_every}
    if args.streaming:
        knobs.update(fragments=2, fragment_sync_delay=1)
    opt = dadt.DistributedOptimizer(keras.optimizers.SGD(args.lr * scale(), momentum=0.9),
                                    mode=args.mode, **knobs)
    model.compile(optimizer=opt, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    state = dadt.elastic.KerasState(model, batch=0, epoch=0)

    def on_reset():
        model.optimizer.learning_rate.assign(args.lr * scale())

    state.register_reset_callbacks([on_reset])
    callbacks = [dadt.elastic.CommitStateCallback(state, args.batches_per_commit),
                 dadt.elastic.UpdateBatchStateCallback(state),
                 dadt.elastic.UpdateEpochStateCallback(state),
                 _Progress(args.progress_file, args.step_delay, state), dadt.callbacks.FlushCallback()]

    @dadt.elastic.run
    def train(state):
        rank, size = dadt.rank(), dadt.size()
        xs, ys = x_train[rank::size], y_train[rank::size]
        steps = len(x_train) // size // args.batch_size  # the same on every rank
        data = np.arange(len(xs))

        def batches():
            rng = np.random.default_rng(rank)
            while True:
                order = rng.permutation(data)
                for i in range(0, len(order) - args.batch_size + 1, args.batch_size):
                    idx = order[i:i + args.batch_size]
                    yield xs[idx], ys[idx]

        state.model.fit(batches(), steps_per_epoch=steps, epochs=args.epochs - state.epoch,
                        callbacks=callbacks, verbose=0)

    train(state)
    logits = model.predict(x_test, verbose=0)
    accuracy = float((logits.argmax(axis=1) == y_test).mean())
    if dadt.rank() == 0:
        print("final test accuracy: %.4f (size %d)" % (accuracy, dadt.size()), flush=True)
    dadt.shutdown()


if __name__ == "__main__":
    main()
