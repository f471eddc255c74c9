"""DistributedOptimizer(mode="sync", compression=Compression.powersgd(...)) against its equations.

Each test trains a model whose gradients do not depend on its weights (loss = sum_k <W_k, X_k>:
the gradient of W_k is X_k), with different data on every rank, and compares every rank's weights
after each step with a reference that simulates every rank in NumPy from the update rule of
docs/training-modes.md (PowerSGD), not from dadt's code:

    M_i = G_i + E_i;  P = orth(mean_i M_i Q);  Q = mean_i M_i^T P;  update = P Q^T;  E_i = M_i - P Q^T

Vectors and matrices too small to gain are averaged whole; the first start_iter steps too. On one
rank sync mode reduces nothing, so nothing is compressed either. Every rank runs every test.
"""
import zlib

import numpy as np
import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_rows_identical, gather_rows

# name: shape. "w" is 24 x 20, "conv" 8 x (3*2*2) = 8 x 12; "small" (3 x 3) is below the
# compression rate at any rank, "bias" is a vector: both go uncompressed.
SHAPES = {"w": (24, 20), "conv": (8, 3, 2, 2), "small": (3, 3), "bias": (20,)}
START = 2
STEPS = 6


class _Dots(torch.nn.Module):
    def __init__(self):
        super().__init__()
        for name, shape in SHAPES.items():
            setattr(self, name, torch.nn.Parameter(torch.zeros(shape, dtype=torch.float64)))

    def forward(self, xs):
        return sum((getattr(self, name) * xs[name]).sum() for name in SHAPES)


def _grads(rank, step):
    gen = torch.Generator().manual_seed(1000 * rank + step)
    return {name: torch.randn(shape, generator=gen, dtype=torch.float64)
            for name, shape in SHAPES.items()}


def _compressed(shape, rank):
    n, m = shape[0], int(np.prod(shape[1:]))
    r = min(rank, n, m)
    return len(shape) >= 2 and n * m > 2.0 * r * (n + m)


def _reference(size, rank, error_feedback, warm_start, scale=1.0):
    """Every rank's weights after each step (the same on every rank), lr 1, from the equations."""
    weights = {name: np.zeros(shape) for name, shape in SHAPES.items()}
    errors, qs, gens = {}, {}, {}
    out = []
    for t in range(STEPS):
        grads = [_grads(i, t) for i in range(size)]
        for name, shape in SHAPES.items():
            gs = [g[name].reshape(shape[0], -1).numpy() for g in grads]
            if size == 1 or t < START or not _compressed(shape, rank):
                update = np.mean(gs, axis=0)
            else:
                n, m = gs[0].shape
                r = min(rank, n, m)
                ms = [g + errors.get((name, i), 0.0) if error_feedback else g
                      for i, g in enumerate(gs)]
                if name not in qs or not warm_start:
                    if name not in gens:
                        seed = zlib.crc32(name.encode())  # seed 0: 0 * 2^32 + crc32(name)
                        gens[name] = torch.Generator().manual_seed(seed)
                    qs[name] = torch.randn(m, r, generator=gens[name], dtype=torch.float64).numpy()
                p, _ = np.linalg.qr(np.mean([mi @ qs[name] for mi in ms], axis=0))
                qs[name] = np.mean([mi.T @ p for mi in ms], axis=0)
                update = p @ qs[name].T
                if error_feedback:
                    for i, mi in enumerate(ms):
                        errors[(name, i)] = mi - update
            weights[name] = weights[name] - scale * update.reshape(shape)
        out.append({k: v.copy() for k, v in weights.items()})
    return out


def _train(nm, world, compression, op=dadt.Average):
    model = _Dots()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                    named_parameters=model.named_parameters(),
                                    compression=compression, op=op)
    seen = []
    for t in range(STEPS):
        opt.zero_grad()
        model(_grads(world.rank, t)).backward()
        opt.step()
        seen.append({name: getattr(model, name).detach().clone() for name in SHAPES})
    flat = torch.cat([getattr(model, name).detach().flatten() for name in SHAPES])
    return seen, gather_rows(flat, nm("weights"))


@pytest.mark.parametrize("rank,error_feedback,warm_start", [
    (1, True, True), (2, True, False), (4, False, True)])
def test_weights_follow_the_equations_on_every_rank(world, nm, rank, error_feedback, warm_start):
    compression = dadt.Compression.powersgd(rank=rank, start_iter=START,
                                            error_feedback=error_feedback, warm_start=warm_start)
    seen, rows = _train(nm, world, compression)

    assert_rows_identical(rows, "weights after %d steps" % STEPS)
    want = _reference(world.size, rank, error_feedback, warm_start)
    for t in range(STEPS):
        for name in SHAPES:
            np.testing.assert_allclose(seen[t][name].numpy(), want[t][name], rtol=1e-9, atol=1e-9,
                                       err_msg="%s after step %d" % (name, t))
    if world.size > 1:  # compression really happened: the update of "w" has rank `rank`
        step = want[START]["w"] - want[START - 1]["w"]
        assert np.linalg.matrix_rank(step, tol=1e-8) == rank


def test_sum_is_size_times_the_average(world, nm):
    compression = dadt.Compression.powersgd(rank=2, start_iter=START)
    seen, rows = _train(nm, world, compression, op=dadt.Sum)

    assert_rows_identical(rows, "weights after %d steps" % STEPS)
    want = _reference(world.size, 2, True, True, scale=world.size)
    for name in SHAPES:
        np.testing.assert_allclose(seen[-1][name].numpy(), want[-1][name], rtol=1e-9, atol=1e-9,
                                   err_msg=name)


def test_an_mlp_trains_alike_on_every_rank(world, nm):
    """A real model (gradients depend on the weights) with rank 1 from the first step: the loss
    falls and every rank holds the same weights."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
                                    named_parameters=model.named_parameters(),
                                    compression=dadt.Compression.powersgd(rank=1, start_iter=0))
    gen = torch.Generator().manual_seed(world.rank)
    x = torch.randn(64, 16, generator=gen)
    y = (x[:, :4].argmax(dim=1))
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    rows = gather_rows(flat, nm("weights"))

    assert_rows_identical(rows, "MLP weights")
    assert losses[-1] < 0.6 * losses[0], losses
