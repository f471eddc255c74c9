"""mode="hogwild": the ranks of one host step one shared copy of the weights, with no lock.

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider \
        test/python_multirank/test_hogwild.py
    dadtrun --mpi -np N ...                                                    # N = 1, 2, 3, 4

The update rule is checked against a reference written from its equation (docs: x <- InnerOpt_i(x,
g_i(x)) on the one shared x, the optimizer's state rank i's own), with the ranks' steps taken in
turns (a barrier between turns) so that the order is known; every test also fails if the ranks
kept weights of their own. Every rank runs every test; skips depend on size() only, and the whole
file skips where the ranks are on more than one host (as test_multihost.py launches this suite):
hogwild is one host's mode, and test/integration/test_training_modes.py checks its refusal there.
"""
import io
import os
import time

import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_rows_identical, gather_rows
from dadt.torch.training_modes import hogwild

LR = 0.1


@pytest.fixture(autouse=True)
def _one_host():
    """local_size() == size() holds on every rank or on none, so every rank skips alike."""
    if dadt.local_size() != dadt.size():
        pytest.skip("mode='hogwild' runs on one host; these ranks are on more than one")


class _Pull(torch.nn.Module):
    """loss = 0.5 ||w - c||^2: the gradient w - c reads the weights, so it sees every rank's
    updates; w starts different on every rank (rank 0's must win)."""

    def __init__(self, n=5):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(n, dtype=torch.float64) * (dadt.rank() + 1))

    def forward(self, c):
        return 0.5 * ((self.w - c) ** 2).sum()


def _target(rank, turn):
    """Rank r's target c at its t-th step."""
    return torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0], dtype=torch.float64) * (rank + 1) + 0.25 * turn


def _hogwild(model, opt, **kwargs):
    return dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), mode="hogwild",
                                     **kwargs)


class _SGDRef:
    """torch.optim.SGD(lr, momentum, weight_decay) written out: g += wd x; b = mu b + g (b = g at
    the first step); x -= lr b."""

    def __init__(self, lr=LR, mu=0.9, wd=0.01):
        self.lr, self.mu, self.wd, self.b = lr, mu, wd, None

    def step(self, x, g):
        g = g + self.wd * x
        self.b = g.clone() if self.b is None else self.mu * self.b + g
        return x - self.lr * self.b


class _AdamRef:
    """torch.optim.Adam(lr) written out, with its own step count t."""

    def __init__(self, lr=LR, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t, self.m, self.v = lr, b1, b2, eps, 0, 0.0, 0.0

    def step(self, x, g):
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        m_hat = self.m / (1 - self.b1 ** self.t)
        v_hat = self.v / (1 - self.b2 ** self.t)
        return x - self.lr * m_hat / (v_hat.sqrt() + self.eps)


OPTIMIZERS = {
    "sgd": (lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9, weight_decay=0.01), _SGDRef),
    "adam": (lambda ps: torch.optim.Adam(ps, lr=LR), _AdamRef),
}


@pytest.mark.parametrize("which", sorted(OPTIMIZERS))
def test_each_step_lands_on_the_one_shared_copy(world, which):
    """Ranks step in turns (0, 1, ..., n-1, 0, ...), a barrier after each turn; after every turn
    every rank's weights equal the reference: x <- InnerOpt_r(x, x - c_r) on one x from rank 0's
    initial weights, each rank with its own optimizer state."""
    make, reference = OPTIMIZERS[which]
    model = _Pull()
    initial = gather_rows(model.w, name="hogwild.rule.%s.initial" % which)[0].clone()
    opt = _hogwild(model, make(model.parameters()))
    opt.flush()  # the first-step barrier is behind us: the turns below are the only barriers
    seen = []
    for turn in range(4):
        for r in range(world.size):
            if world.rank == r:
                opt.zero_grad()
                model(_target(r, turn)).backward()
                opt.step()
            dadt.barrier()
            seen.append((r, turn, model.w.detach().clone()))
            dadt.barrier()  # every rank has read before the next turn writes
    x = initial.clone()
    refs = [reference() for _ in range(world.size)]
    for r, turn, w in seen:
        x = refs[r].step(x, x - _target(r, turn))
        assert torch.allclose(w, x, rtol=0, atol=1e-12), \
            "rank %d after rank %d's step %d: %s vs %s" % (world.rank, r, turn, w, x)


class _Mixed(torch.nn.Module):
    """Parameters of several dtypes and sizes (a 0-d one, one of 0 elements), different on every
    rank before the optimizer is built."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(100 + dadt.rank())
        self.a = torch.nn.Parameter(torch.randn(3, 4, generator=g))
        self.b = torch.nn.Parameter(torch.randn(7, generator=g, dtype=torch.float64))
        self.c = torch.nn.Parameter(torch.randn((), generator=g).to(torch.bfloat16))
        self.d = torch.nn.Parameter(torch.zeros(0))
        self.e = torch.nn.Parameter(torch.randn(33, generator=g).to(torch.float16))


def _snapshot(model, tag):
    """Every rank's parameters, one gathered row per rank per parameter."""
    return {n: gather_rows(p.double(), name="hogwild.%s.%s" % (tag, n))
            for n, p in model.named_parameters()}


def test_rank_0s_weights_become_everyones_in_one_unlinked_segment(world, nm):
    model = _Mixed()
    before = _snapshot(model, "mixed.before")
    opt = _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR))
    after = _snapshot(model, "mixed.after")
    paths = dadt.allgather_object(opt._engine.segment_path, name=nm("paths"))
    for n in before:
        for r in range(world.size):
            assert torch.equal(after[n][r], before[n][0]), "%s on rank %d" % (n, r)
    assert len(set(paths)) == 1, paths
    assert os.path.basename(paths[0]).startswith(hogwild.SEGMENT_PREFIX)
    assert not os.path.exists(paths[0]), "the segment's name was not unlinked"
    # One segment: each parameter is a view into it, at an aligned offset.
    base = model.a.untyped_storage().data_ptr()
    for n, p in model.named_parameters():
        assert p.untyped_storage().data_ptr() == base, n
        assert (p.data_ptr() - base) % hogwild.ALIGN == 0, n


def test_two_optimizers_get_two_segments_and_leave_none_behind(world, nm):
    models = [_Pull(), _Pull()]
    opts = [_hogwild(m, torch.optim.SGD(m.parameters(), lr=LR)) for m in models]
    paths = [o._engine.segment_path for o in opts]
    # Rank 0's names are <prefix><its pid>-<random>: none of them is left.
    job = os.path.basename(paths[0]).rsplit("-", 1)[0] + "-"
    left = [f for f in os.listdir(hogwild.segment_dir()) if f.startswith(job)]
    if world.rank == 0:
        with torch.no_grad():
            models[0].w.add_(1.0)  # reaches every rank's models[0], and no models[1]
    opts[0].flush()
    assert paths[0] != paths[1]
    assert left == []
    start = torch.arange(5, dtype=torch.float64)  # rank 0's initial weights
    assert torch.equal(models[0].w.detach(), start + 1.0)
    assert torch.equal(models[1].w.detach(), start)


def test_concurrent_steps_all_land_and_flush_shows_them_everywhere(world, nm):
    """Every rank steps at once, no turns: plain SGD on loss <w, x_r> (gradient x_r, whatever the
    weights), so the end point is w0 - lr * sum over ranks and steps of x_r, less the writes lost
    when two ranks update one component at the same instant (Hogwild's race: measured at 0-4
    whole steps of 600 here, when the ranks run in lockstep). Ranks with weights of their own
    would differ; a rank whose steps did not land would leave most of its share missing."""
    steps = 100
    w = torch.nn.Parameter(torch.zeros(64, dtype=torch.float64))
    x = [torch.linspace(-1, 1, 64, dtype=torch.float64) * (r + 1) + r for r in range(world.size)]
    opt = dadt.DistributedOptimizer(torch.optim.SGD([w], lr=LR), named_parameters=[("w", w)],
                                    mode="hogwild")
    for _ in range(steps):
        opt.zero_grad()
        (w * x[world.rank]).sum().backward()
        opt.step()
    opt.flush()
    rows = gather_rows(w, name=nm("w"))
    assert_rows_identical(rows, "weights after flush")
    missing = (rows[0] + LR * steps * sum(x)).abs() / (LR * steps * sum(xr.abs() for xr in x))
    assert missing.max() <= 0.25, \
        "up to %.0f%% of a component's updates lost" % (100 * missing.max())


@pytest.mark.usefixtures("require_two_ranks")
def test_flush_returns_once_every_rank_has_stepped(world, nm):
    """The last rank steps three more times, slowly, while the others are already in flush();
    when flush() returns, every rank reads those steps."""
    model = _Pull()
    opt = _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR))
    opt.flush()
    start = torch.arange(5, dtype=torch.float64)  # rank 0's initial weights: no step yet
    c = torch.ones(5, dtype=torch.float64)
    if world.rank == world.size - 1:
        for _ in range(3):
            time.sleep(0.2)
            opt.zero_grad()
            model(c).backward()
            opt.step()
    opt.flush()
    x = start.clone()
    for _ in range(3):
        x = x - LR * (x - c)
    assert torch.allclose(model.w.detach(), x, rtol=0, atol=1e-12), (model.w, x)


def test_checkpoints_and_broadcasts(world, nm):
    """state_dict of the model is the shared weights; one rank loading a state dict changes
    every rank's weights; the optimizer's state stays per rank and round-trips;
    broadcast_parameters / broadcast_optimizer_state from any root keep rank 0's weights."""
    model = _Pull()
    initial = gather_rows(model.w, name=nm("initial"))[0].clone()
    opt = _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    root = world.size - 1
    dadt.broadcast_parameters(model.state_dict(), root_rank=root)
    dadt.broadcast_optimizer_state(opt, root_rank=root)
    after_broadcast = model.w.detach().clone()
    opt.zero_grad()
    model(_target(world.rank, 0)).backward()
    opt.step()
    opt.flush()
    saved = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, saved)
    state = torch.load(io.BytesIO(saved.getvalue()))
    trained = model.w.detach().clone()
    # Momentum is this rank's own: each rank's buffer is its own first gradient.
    momenta = gather_rows(state["opt"]["state"][0]["momentum_buffer"], name=nm("momentum"))
    opt.load_state_dict(state["opt"])
    # Restoring the weights on one rank restores them for all.
    opt.flush()
    if world.rank == root:
        model.load_state_dict({"w": torch.full((5,), 7.0, dtype=torch.float64)})
    opt.flush()
    assert torch.equal(after_broadcast, initial)
    assert torch.equal(state["model"]["w"], trained)
    assert set(state["opt"]) == {"state", "param_groups"}
    if world.size > 1:
        assert not torch.equal(momenta[0], momenta[1])
    assert torch.equal(model.w.detach(), torch.full((5,), 7.0, dtype=torch.float64))


@pytest.mark.parametrize("kwargs,message", [
    (dict(groups=2), "groups is a mode='sync' option"),
    (dict(bucket_bytes=1024), "bucket_bytes is an option of mode='async'"),
    (dict(compression=dadt.Compression.fp16), "compression= is not supported"),
    (dict(op=dadt.Sum), "op= and gradient_predivide_factor= do not apply"),
    (dict(gradient_predivide_factor=2.0), "op= and gradient_predivide_factor= do not apply"),
], ids=["groups", "bucket_bytes", "compression", "op", "predivide"])
def test_options_it_cannot_take_are_refused(world, kwargs, message):
    model = _Pull()
    with pytest.raises(ValueError, match=message):
        _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR), **kwargs)


@pytest.mark.usefixtures("require_two_ranks")
def test_a_process_set_is_refused(world):
    ps = dadt.add_process_set([0])
    try:
        model = _Pull()
        with pytest.raises(ValueError, match="process_set= is not supported"):
            _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR), process_set=ps)
    finally:
        dadt.remove_process_set(ps)


@pytest.mark.usefixtures("require_two_ranks")
def test_ranks_on_two_hosts_are_refused_on_every_rank(world, monkeypatch):
    """Only the last rank sees itself on another host; every rank raises, naming the ranks."""
    if world.rank == world.size - 1:
        monkeypatch.setattr(hogwild, "local_size", lambda: 1)
    model = _Pull()
    with pytest.raises(ValueError, match="not all on one host") as err:
        _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR))
    assert "local_size() is 1 on rank(s) %d, not size() = %d" % (world.size - 1, world.size) \
        in str(err.value)


@pytest.mark.usefixtures("require_two_ranks")
def test_different_parameters_on_one_rank_are_refused_on_every_rank(world):
    model = _Pull(n=6 if world.rank == world.size - 1 else 5)
    with pytest.raises(ValueError, match="rank\\(s\\) %d differ" % (world.size - 1)):
        _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR))


def test_a_replaced_parameter_is_refused_by_name(world):
    model = _Pull()
    opt = _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR))
    model.w.data = model.w.data.clone()  # now private to this rank
    model(_target(world.rank, 0)).backward()
    with pytest.raises(RuntimeError, match="parameter 'w' no longer lives in the shared segment"):
        opt.step()


def test_accumulation_and_clipping_use_this_ranks_gradients(world, nm):
    """backward_passes_per_step is autograd's accumulation; synchronize() waits for nothing, so
    a clip between it and step() clips this rank's own gradient."""
    w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    opt = dadt.DistributedOptimizer(torch.optim.SGD([w], lr=LR), named_parameters=[("w", w)],
                                    mode="hogwild", backward_passes_per_step=2)
    opt.flush()
    accumulated = None
    for r in range(world.size):
        if world.rank == r:
            opt.zero_grad()
            for _ in range(2):
                (w * 3.0).sum().backward()  # gradient 3 each pass: 6 accumulated
            opt.synchronize()
            accumulated = w.grad.clone()
            torch.nn.utils.clip_grad_norm_([w], 1.0)
            with opt.skip_synchronize():
                opt.step()
        dadt.barrier()
    assert torch.equal(accumulated, torch.full((4,), 6.0, dtype=torch.float64))
    # Each rank moved w by lr * (a unit vector, up to clip_grad_norm_'s 1e-6): n steps in all.
    expected = torch.full((4,), -LR * world.size * 0.5, dtype=torch.float64)
    assert torch.allclose(w.detach(), expected, rtol=0, atol=1e-6), (w, expected)


@pytest.mark.parametrize("where", ["create", "open"])
def test_a_segment_that_cannot_be_made_or_mapped_fails_every_rank_and_leaves_nothing(
        world, nm, monkeypatch, where):
    """Rank 0 cannot create the file (a full /dev/shm), or the last rank cannot map it (a host
    that does not share rank 0's /dev/shm): every rank raises, naming the cause, and no file of
    rank 0's is left."""
    if where == "open" and world.size == 1:
        pytest.skip("rank 0 only creates the segment: no other rank maps it")
    pid0 = dadt.broadcast_object(os.getpid(), 0, name=nm("pid"))
    failing = 0 if where == "create" else world.size - 1

    def fail(path, nbytes):
        raise OSError(28, "No space left on device" if where == "create" else "No such file")

    if world.rank == failing:
        monkeypatch.setattr(hogwild, where + "_segment", fail)
    expect = "rank 0 could not create .* No space left" if where == "create" else \
        "could not map rank 0's segment .*rank %d: .*No such file" % failing
    model = _Pull()
    with pytest.raises(RuntimeError, match=expect):
        _hogwild(model, torch.optim.SGD(model.parameters(), lr=LR))
    dadt.barrier()  # rank 0 has unlinked before anyone looks
    prefix = "%s%d-" % (hogwild.SEGMENT_PREFIX, pid0)
    assert [f for f in os.listdir(hogwild.segment_dir()) if f.startswith(prefix)] == []
