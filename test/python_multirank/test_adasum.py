"""op=Adasum: the allreduce (every front end's op) and DistributedOptimizer(op=Adasum).

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_multirank/test_adasum.py
    dadtrun --mpi -np N ...                                                       # N = 1, 2, 3, 4

Expected values come from the formula, written here in NumPy float64:
Adasum(a, b) = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b, over a binary tree of the ranks (rank
r with r ^ L at level L = 1, 2, 4, ..., the lower rank's as a); at a size that is not a power of
two, ranks p.. fold into rank r - p first (p the largest power of two). Every rank runs every test;
skips depend on size() only.
"""
import numpy as np
import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_rows_identical, gather_rows


def _pair(a, b):
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / (2 * aa) if aa else 1.0
    cb = 1.0 - dot / (2 * bb) if bb else 1.0
    return ca * a + cb * b


def _tree(vectors):
    v = [np.asarray(x, dtype=np.float64) for x in vectors]
    p = 1
    while p * 2 <= len(v):
        p *= 2
    for i in range(len(v) - p):
        v[i] = _pair(v[i], v[i + p])
    v = v[:p]
    level = 1
    while level < p:
        v = [_pair(v[i & ~level], v[i | level]) for i in range(p)]
        level *= 2
    return v[0]


def _vector(rank, n, salt=0):
    rng = np.random.default_rng(1000 * salt + rank)
    return rng.normal(size=n) * (rank + 1)


TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_allreduce_is_the_tree_of_the_formula(world, nm, dtype):
    mine = torch.tensor(_vector(world.rank, 37)).to(dtype)
    out = dadt.allreduce(mine, op=dadt.Adasum, name=nm())
    inputs = [torch.tensor(_vector(r, 37)).to(dtype).double().numpy() for r in range(world.size)]
    want = _tree(inputs)
    assert out.dtype == dtype
    err = np.abs(out.double().numpy() - want).max() / (np.abs(want).max() + 1e-30)
    assert err < TOLERANCE[dtype], err
    assert_rows_identical(gather_rows(out.double(), nm("rows")), "Adasum result")


def test_fused_tensors_each_get_their_own_coefficients(world, nm):
    """Several tensors in flight at once are fused by the runtime; each is combined on its own."""
    sizes = [5, 1, 300, 17]
    handles = [dadt.allreduce_async(torch.tensor(_vector(world.rank, n, salt=k)), op=dadt.Adasum,
                                    name=nm(k)) for k, n in enumerate(sizes)]
    outs = [dadt.synchronize(h) for h in handles]
    for k, (n, out) in enumerate(zip(sizes, outs)):
        want = _tree([_vector(r, n, salt=k) for r in range(world.size)])
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12, err_msg="tensor %d" % k)


def test_orthogonal_add_and_parallel_average(world, nm):
    """Horovod's two Adasum checks: orthogonal columns of Q (QR of a Gaussian) sum, multiples of
    one vector average."""
    rng = np.random.default_rng(2)
    q, _ = np.linalg.qr(rng.normal(size=(64, world.size)))
    orth = dadt.allreduce(torch.tensor(q[:, world.rank]), op=dadt.Adasum, name=nm("orth"))
    np.testing.assert_allclose(orth.numpy(), q.sum(axis=1), rtol=1e-10, atol=1e-12)
    a, scales = rng.normal(size=64), rng.normal(size=world.size)
    par = dadt.allreduce(torch.tensor(a * scales[world.rank]), op=dadt.Adasum, name=nm("par"))
    # Each pair averages: over a power of two of ranks, the mean; over 3, ranks 0 and 2 fold
    # first, so the weights are 1/4, 1/2, 1/4.
    weights = {1: [1], 2: [.5, .5], 3: [.25, .5, .25], 4: [.25] * 4}.get(world.size)
    if weights is not None:
        np.testing.assert_allclose(par.numpy(), a * (scales @ weights), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(par.numpy(), _tree([a * c for c in scales]), rtol=1e-9, atol=1e-12)


def test_in_place_and_a_zero_tensor(world, nm):
    t = torch.tensor(_vector(world.rank, 9))
    dadt.allreduce_(t, op=dadt.Adasum, name=nm("inplace"))
    np.testing.assert_allclose(t.numpy(), _tree([_vector(r, 9) for r in range(world.size)]),
                               rtol=1e-10, atol=1e-12)
    z = dadt.allreduce(torch.zeros(4), op=dadt.Adasum, name=nm("zero"))
    assert torch.equal(z, torch.zeros(4))


def test_integers_and_reducescatter_are_refused_on_every_rank(world, nm):
    with pytest.raises(ValueError, match="Adasum needs float16, bfloat16, float32 or float64"):
        dadt.allreduce(torch.arange(4, dtype=torch.int32), op=dadt.Adasum, name=nm("int"))
    with pytest.raises(NotImplementedError, match="Adasum is an allreduce"):
        dadt.reducescatter(torch.ones(world.size * 2), op=dadt.Adasum, name=nm("rs"))
    # The job goes on.
    assert dadt.allreduce(torch.ones(2), op=dadt.Sum, name=nm("after")).tolist() == [world.size] * 2


@pytest.mark.usefixtures("require_two_ranks")
def test_a_process_set_is_refused(world, nm):
    """Refused when the tensor is submitted, before any rank waits: rank 0 alone may try."""
    ps = dadt.add_process_set([0])
    try:
        if world.rank == 0:
            with pytest.raises(NotImplementedError, match="Adasum runs on the global process set only"):
                dadt.allreduce(torch.ones(3), op=dadt.Adasum, name=nm(), process_set=ps)
    finally:
        dadt.remove_process_set(ps)


class _Quadratic(torch.nn.Module):
    """loss = 0.5 ||A w - y||^2 with rank-dependent A, y: each rank's gradient differs."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-1, 1, 6, dtype=torch.float64))
        self.b = torch.nn.Parameter(torch.tensor([0.5], dtype=torch.float64))

    def forward(self, a, y):
        return 0.5 * ((a @ self.w + self.b - y) ** 2).sum()


def _data(rank, step):
    rng = np.random.default_rng(100 * rank + step)
    return torch.tensor(rng.normal(size=(4, 6))), torch.tensor(rng.normal(size=4))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_optimizer_combines_each_ranks_update(world, nm, momentum):
    """x <- x0 + Adasum_i(SGD_i(x0, g_i) - x0), with each rank's momentum its own: checked
    against every rank's update computed here with torch.optim.SGD on a copy."""
    lr, steps = 0.05, 3
    model = _Quadratic()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum),
                                    named_parameters=model.named_parameters(), op=dadt.Adasum)
    refs = []
    for r in range(world.size):
        m = _Quadratic()
        refs.append((m, torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)))
    for step in range(steps):
        x0 = [p.detach().clone() for p in model.parameters()]
        deltas = []
        for r, (m, o) in enumerate(refs):
            with torch.no_grad():
                for p, start in zip(m.parameters(), x0):
                    p.copy_(start)
            o.zero_grad()
            m(*_data(r, step)).backward()
            o.step()
            deltas.append([(p.detach() - start).numpy() for p, start in zip(m.parameters(), x0)])
        opt.zero_grad()
        model(*_data(world.rank, step)).backward()
        opt.step()
        for k, (p, start) in enumerate(zip(model.parameters(), x0)):
            want = start.numpy() + _tree([d[k] for d in deltas])
            np.testing.assert_allclose(p.detach().numpy(), want, rtol=1e-9, atol=1e-12,
                                       err_msg="step %d, parameter %d" % (step, k))


def test_optimizer_options_it_cannot_take_are_refused(world):
    model = _Quadratic()
    for kwargs, message in [({"mode": "async"}, "op=Adasum combines each step's updates"),
                            ({"compression": dadt.Compression.fp16}, "compression= is not supported")]:
        with pytest.raises(ValueError, match=message):
            dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      named_parameters=model.named_parameters(), op=dadt.Adasum,
                                      **kwargs)
