"""Data-parallel model.fit on scikit-learn's digits with Keras 3 and dadt (three added lines).

    dadtrun --gloo -np 2 python examples/keras/train_digits.py          # or -np 1, 3, ...
    dadtrun --gloo -np 2 python examples/keras/train_digits.py --mode diloco --sync-every 8
                                                   # or local_sgd, easgd (modes that send less)

Each rank fits on its own shard; dadt.DistributedOptimizer averages the gradients (in the modes
that send less: each rank steps on its own gradients and the model is exchanged every
--sync-every steps, and FlushCallback makes the ranks' weights equal at the end), the callbacks
broadcast rank 0's initial state, ramp the learning rate up and average the metrics. Rank 0
prints one line per epoch and the accuracy over the whole test set:

    epoch 20 loss 0.0123 accuracy 0.9722
    final test accuracy: 0.9722
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import dadt.keras as dadt  # noqa: E402


class PrintEpoch(keras.callbacks.Callback):
    """Rank 0 prints the (rank-averaged) loss and test accuracy of each epoch."""

    def on_epoch_end(self, epoch, logs=None):
        if dadt.rank() == 0:
            print(f"epoch {epoch + 1} loss {logs['loss']:.4f} accuracy {logs['val_accuracy']:.4f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank; scaled by size()")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--mode", choices=["sync", "local_sgd", "diloco", "easgd"], default="sync",
                   help="DistributedOptimizer training mode (docs/frameworks.md, \"Modes that send less\")")
    p.add_argument("--sync-every", type=int, default=8,
                   help="local_sgd, diloco, easgd: steps between two exchanges of the model")
    p.add_argument("--compression", choices=["none", "fp16", "bf16", "int8"], default="none",
                   help="what the gradients (diloco: the pseudo-gradient) travel as")
    args = p.parse_args()

    dadt.init()                                                                   # added line 1
    rank, size = dadt.rank(), dadt.size()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2,
                                                        random_state=args.seed, stratify=digits.target)
    # Same number of rows (hence of steps) on every rank: trim to the smallest shard.
    rows = len(x_train) // size
    x_shard, y_shard = x_train[rank::size][:rows], y_train[rank::size][:rows]

    keras.utils.set_random_seed(args.seed + rank)  # different on purpose: the broadcast fixes it
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    opt = keras.optimizers.SGD(learning_rate=args.lr * size, momentum=0.9)
    knobs = {} if args.mode == "sync" else {"mode": args.mode, "sync_every": args.sync_every}
    compression = None
    if args.compression != "none":  # diloco takes the names; sync dadt.tensorflow's compressors
        from dadt.tensorflow import Compression
        compression = args.compression if args.mode == "diloco" else getattr(Compression, args.compression)
    model.compile(optimizer=dadt.DistributedOptimizer(opt, compression=compression, **knobs),  # added line 2
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    callbacks = [dadt.callbacks.BroadcastGlobalVariablesCallback(0),             # added line 3
                 dadt.callbacks.MetricAverageCallback(),
                 dadt.callbacks.LearningRateWarmupCallback(args.lr * size, warmup_epochs=2),
                 PrintEpoch(),
                 dadt.callbacks.FlushCallback()]  # the modes that send less: equal weights at the end
    model.fit(x_shard, y_shard, batch_size=args.batch_size, epochs=args.epochs, shuffle=True,
              validation_data=(x_test[rank::size], y_test[rank::size]), callbacks=callbacks, verbose=0)

    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if rank == 0:
        print(f"final test accuracy: {accuracy:.4f}", flush=True)
    dadt.shutdown()


if __name__ == "__main__":
    main()
