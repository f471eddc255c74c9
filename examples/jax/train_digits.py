"""Data-parallel training of a small MLP on scikit-learn's digits with JAX, optax and dadt.

    dadtrun --gloo -np 2 python examples/jax/train_digits.py          # or -np 1, 3, ...
    dadtrun --gloo -np 2 python examples/jax/train_digits.py --mode diloco --sync-every 8
                                                   # or local_sgd, easgd (modes that send less)

The step is jax.jit-compiled; dadt.average_gradients() (an optax transformation, first in the
chain) averages the gradients across ranks and dadt.broadcast_parameters makes every rank start
from rank 0's parameters. With --mode local_sgd, diloco or easgd, dadt.DistributedOptimizer
makes each rank step on its own gradients and exchanges the parameters every --sync-every steps;
tx.flush(params) makes them equal at the end. Rank 0 prints one line per epoch and the accuracy
over the whole test set:

    epoch 20 loss 0.0123 accuracy 0.9722
    final test accuracy: 0.9722
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import dadt.jax as dadt


def init_params(key, sizes=(64, 128, 10)):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in),
                       "b": jnp.zeros(fan_out)})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05, help="learning rate of one rank; scaled by size()")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--mode", choices=["sync", "local_sgd", "diloco", "easgd"], default="sync",
                   help="training mode (docs/frameworks.md, \"Modes that send less\")")
    p.add_argument("--sync-every", type=int, default=8,
                   help="local_sgd, diloco, easgd: steps between two exchanges of the parameters")
    p.add_argument("--compression", choices=["none", "fp16", "bf16", "int8"], default="none",
                   help="diloco: what the pseudo-gradient travels as")
    args = p.parse_args()

    dadt.init()
    rank, size = dadt.rank(), dadt.size()
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, digits.target, test_size=0.2,
                                                        random_state=args.seed, stratify=digits.target)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]

    # Different initialisation on every rank on purpose: broadcast_parameters makes them equal.
    params = dadt.broadcast_parameters(init_params(jax.random.PRNGKey(args.seed + rank)), root_rank=0)
    if args.mode == "sync":
        tx = optax.chain(dadt.average_gradients(), optax.sgd(args.lr * size, momentum=0.9))
    else:
        tx = dadt.DistributedOptimizer(optax.sgd(args.lr * size, momentum=0.9), mode=args.mode,
                                       sync_every=args.sync_every,
                                       **({"compression": args.compression} if args.mode == "diloco" else {}))
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    # Every rank takes the same number of full batches (static shapes: one compiled step).
    steps = max(1, (len(x_train) // size) // args.batch_size)
    rng = np.random.default_rng(args.seed * 1000 + rank)
    for epoch in range(1, args.epochs + 1):
        perm = rng.permutation(len(x_shard))
        total = 0.0
        for step in range(steps):
            idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, x_shard[idx], y_shard[idx])
            total += float(loss)
        loss = dadt.allreduce(jnp.array([total / steps]), name="epoch.loss", op=dadt.Average)
        correct = int(jnp.sum(jnp.argmax(forward(params, x_test[rank::size]), axis=1) == y_test[rank::size]))
        counts = np.asarray(dadt.allreduce(jnp.array([correct, len(y_test[rank::size])], jnp.int32),
                                           name="epoch.accuracy", op=dadt.Sum))
        if rank == 0:
            print(f"epoch {epoch} loss {float(loss[0]):.4f} accuracy {counts[0] / counts[1]:.4f}", flush=True)

    if args.mode != "sync":  # the exchanges in flight, then one last one: equal parameters everywhere
        params = tx.flush(params)
    accuracy = float(jnp.mean(jnp.argmax(forward(params, x_test), axis=1) == y_test))
    if rank == 0:
        print(f"final test accuracy: {accuracy:.4f}", flush=True)
    dadt.shutdown()


if __name__ == "__main__":
    main()
