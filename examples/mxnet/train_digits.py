"""Data-parallel training of a small MLP on scikit-learn's digits with MXNet Gluon and dadt.mxnet.

Run it in the MXNet virtualenv (MXNet 1.9.1 needs NumPy < 1.24; tools/mxnet_venv.sh makes it):

    PY=$(tools/mxnet_venv.sh)
    dadtrun --gloo -np 2 $PY examples/mxnet/train_digits.py           # or -np 1, 3, ...; --mpi

Horovod's recipe: every rank initializes the net differently, hvd.broadcast_parameters gives them
rank 0's weights, and hvd.DistributedTrainer averages the gradients in each trainer.step().
Each rank trains on its own shard; rank 0 prints one line per epoch and the accuracy over the
whole test set:

    epoch 20 loss 0.0123 accuracy 0.9722
    final test accuracy: 0.9722
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import dadt.mxnet as hvd


def make_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(128, activation="relu"), gluon.nn.Dense(10))
    return net


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank; scaled by size()")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--compression", choices=["none", "fp16"], default="none",
                   help="what the gradients travel as")
    args = p.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2,
                                                        random_state=args.seed, stratify=digits.target)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size].astype(np.float32)

    # Different initialisation on every rank on purpose: broadcast_parameters makes them equal.
    # The input size is left to MXNet (deferred initialization): the broadcast happens when the
    # first forward pass creates the weights.
    mx.random.seed(args.seed + rank)
    net = make_net()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    params = net.collect_params()
    hvd.broadcast_parameters(params, root_rank=0)
    trainer = hvd.DistributedTrainer(params, "sgd",
                                     {"learning_rate": args.lr * size, "momentum": 0.9},
                                     compression=getattr(hvd.Compression, args.compression))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    # Every rank takes the same number of steps per epoch (each step is a collective).
    steps = max(1, (len(x_train) // size) // args.batch_size)
    rng = np.random.default_rng(args.seed * 1000 + rank)
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(x_shard))
        total = 0.0
        for step in range(steps):
            idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
            data, label = mx.nd.array(x_shard[idx]), mx.nd.array(y_shard[idx])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(len(idx))
            total += float(loss.mean().asscalar())
        loss = hvd.allreduce(mx.nd.array([total / steps]), name="epoch.loss")
        mine = net(mx.nd.array(x_test[rank::size])).argmax(axis=1).asnumpy()
        correct = int((mine == y_test[rank::size]).sum())
        counts = hvd.allreduce(mx.nd.array([correct, len(mine)], dtype="int64"), name="epoch.accuracy",
                               op=hvd.Sum).asnumpy()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.asscalar():.4f} accuracy {counts[0] / counts[1]:.4f}", flush=True)

    predicted = net(mx.nd.array(x_test)).argmax(axis=1).asnumpy()
    accuracy = float((predicted == y_test).mean())
    if rank == 0:
        print(f"final test accuracy: {accuracy:.4f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
