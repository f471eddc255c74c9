"""The modes that send less (local_sgd, diloco, easgd) against their equations.

Each test trains a model whose gradient does not depend on its weights (loss = <w, x>: the
gradient is x), with different data on every rank, and compares every rank's weights after each
step with a reference that simulates every rank in plain torch from the update rules of
docs/training-modes.md (not from dadt's code). Every rank runs every test.
"""
import io

import pytest
import torch

import dadt.torch as dadt
from collective_utils import assert_rows_identical, gather_rows

LR = 0.1


class _Dots(torch.nn.Module):
    """loss = <w1, x[:3]> + <w2, x[3:]>: two parameters (two fragments when asked for)."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
        self.w2 = torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))

    def forward(self, x):
        return (self.w1 * x[:3]).sum() + (self.w2 * x[3:]).sum()


def _grad(rank, step):
    """Rank r's gradient at step t (both parameters, concatenated)."""
    base = torch.tensor([1.0, 2.0, 4.0, -1.0, 3.0], dtype=torch.float64)
    return base * (rank + 1) * (1 + (step % 3)) + 0.25 * rank


FRAGMENTS = {1: [slice(0, 5)], 2: [slice(0, 3), slice(3, 5)]}  # w1 | w2


def _schedule(every, fragments, delay, s):
    """(starts, finishes) at inner step s: fragment f finishes when s % H == ((f+1)H // F) % H
    and starts d steps earlier (docs/training-modes.md, "Schedule")."""
    offsets = [((f + 1) * every // fragments) % every for f in range(fragments)]
    return ([f for f, o in enumerate(offsets) if (s + delay) % every == o],
            [f for f, o in enumerate(offsets) if s % every == o])


class _Nesterov:
    """torch.optim.SGD(lr, momentum, nesterov=True) written out: m = mu m + g; x -= lr (g + mu m)."""

    def __init__(self, lr=0.7, mu=0.9):
        self.lr, self.mu, self.m = lr, mu, {}

    def step(self, f, theta, delta):
        self.m[f] = delta.clone() if f not in self.m else self.mu * self.m[f] + delta
        return theta - self.lr * (delta + self.mu * self.m[f])


def _reference(mode, size, steps, every, fragments=1, delay=0, warmup=0, alpha=0.0,
               rate=None, asynchronous=False, flush=True):
    """Every rank's weights after each step (list over steps of list over ranks), and after flush."""
    x = [torch.zeros(5, dtype=torch.float64) for _ in range(size)]
    frags = FRAGMENTS[fragments]
    rate = 0.9 / size if rate is None else rate
    outer = _Nesterov()
    sent, started, history, landed_at = {}, {}, [], {}
    if mode == "easgd":
        delay = every if asynchronous else 0
    center = None
    for t in range(steps):
        if t == warmup:  # the weights every rank starts its inner steps from
            synced, center = x[0].clone(), x[0].clone()
        mean_grad = sum(_grad(r, t) for r in range(size)) / size
        for r in range(size):
            x[r] = x[r] - LR * (mean_grad if t < warmup else _grad(r, t))
        s = t + 1 - warmup
        if s >= 1:
            starts, finishes = _schedule(every, fragments, delay, s)

            def start(f):
                sl = frags[f]
                if mode == "local_sgd":
                    sent[f] = [xr[sl].clone() for xr in x]
                    started[f] = [xr[sl].clone() for xr in x]
                elif mode == "diloco":
                    sent[f] = [theta_of(sl) - xr[sl] for xr in x]
                else:
                    sent[f] = [xr[sl].clone() for xr in x]
                    for xr in x:
                        xr[sl] = xr[sl] - rate * (xr[sl] - center[sl])

            def finish(f):
                sl = frags[f]
                if f not in sent:
                    return
                landed_at[f] = s
                avg = sum(sent.pop(f)) / size
                if mode == "local_sgd":  # streaming: plus the steps taken since the start
                    begun = started.pop(f)
                    for r, xr in enumerate(x):
                        xr[sl] = avg + (xr[sl] - begun[r]) if delay else avg
                elif mode == "diloco":
                    new_theta = outer.step(f, synced[sl], avg)
                    synced[sl] = new_theta
                    for xr in x:
                        xr[sl] = (1 - alpha) * new_theta + alpha * xr[sl]
                else:
                    center[sl] = center[sl] + size * rate * (avg - center[sl])

            theta_of = lambda sl: synced[sl]  # noqa: E731
            if delay == 0:
                for f in starts:
                    start(f)
            for f in finishes:
                finish(f)
            if delay != 0:
                for f in starts:
                    start(f)
        history.append([xr.clone() for xr in x])
    if not flush:
        return history, None
    for f in sorted(sent):
        finish(f)
    s = steps - warmup
    for f in range(fragments):
        sl = frags[f]
        if (mode == "local_sgd" and delay == 0) or (mode == "diloco" and alpha == 0):
            if landed_at.get(f) == s:
                continue  # every rank holds the same weights since this step's exchange
        if mode == "diloco":
            avg = sum(synced[sl] - xr[sl] for xr in x) / size
            synced[sl] = outer.step(f, synced[sl], avg)
            for xr in x:
                xr[sl] = synced[sl]
        else:
            avg = sum(xr[sl] for xr in x) / size
            for xr in x:
                xr[sl] = avg
    return history, [xr.clone() for xr in x]


def _make(mode, momentum=0.0, **knobs):
    """A _Dots model and its DistributedOptimizer over SGD(lr=LR, momentum)."""
    model = _Dots()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=momentum),
                                    named_parameters=model.named_parameters(), mode=mode,
                                    model=model, **knobs)
    return model, opt


def _train(world, mode, steps, flush=True, **knobs):
    model, opt = _make(mode=mode, **knobs)
    seen = []
    for t in range(steps):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
        seen.append(torch.cat([model.w1.detach(), model.w2.detach()]).clone())
    final = None
    if flush:
        opt.flush()
        final = torch.cat([model.w1.detach(), model.w2.detach()]).clone()
    return seen, final, opt


CASES = [
    ("local_sgd", dict(sync_every=3)),
    ("local_sgd", dict(sync_every=4, fragments=2, warmup_steps=2)),
    ("local_sgd", dict(sync_every=4, fragments=2, fragment_sync_delay=1, warmup_steps=1)),
    ("diloco", dict(sync_every=3)),
    ("diloco", dict(sync_every=4, fragments=2, fragment_sync_delay=1, warmup_steps=1)),
    ("diloco", dict(sync_every=4, fragment_sync_delay=2, fragment_update_alpha=0.5)),
    ("easgd", dict(sync_every=3)),
    ("easgd", dict(sync_every=3, asynchronous=True, moving_rate=0.3)),
]


def _ref_knobs(knobs):
    names = {"sync_every": "every", "fragments": "fragments", "fragment_sync_delay": "delay",
             "warmup_steps": "warmup", "fragment_update_alpha": "alpha", "moving_rate": "rate",
             "asynchronous": "asynchronous"}
    return {names[k]: v for k, v in knobs.items()}


@pytest.mark.parametrize("mode,knobs", CASES, ids=["%s-%d" % (m, i) for i, (m, _) in enumerate(CASES)])
def test_weights_follow_the_equations(world, mode, knobs):
    steps = 11
    seen, final, _ = _train(world, mode, steps, **knobs)
    history, expected_final = _reference(mode, world.size, steps, **_ref_knobs(knobs))
    for t in range(steps):
        assert torch.allclose(seen[t], history[t][world.rank], rtol=1e-12, atol=1e-12), \
            (mode, knobs, t, seen[t], history[t][world.rank])
    assert torch.allclose(final, expected_final[world.rank], rtol=1e-12, atol=1e-12)
    assert_rows_identical(gather_rows(final, name="periodic.final.%s.%s" % (mode, sorted(knobs))),
                          "weights after flush()")


def test_flush_right_after_an_exchange_changes_nothing(world):
    """DiLoCo's last exchange landed at the last step: every rank is on theta, and another outer
    step would only apply the outer momentum, so flush() leaves the weights as they are."""
    model, opt = _make(mode="diloco", sync_every=4)
    for t in range(8):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
    landed = [p.detach().clone() for p in model.parameters()]
    opt.flush()
    assert all(torch.equal(a, p) for a, p in zip(landed, model.parameters()))


def test_second_flush_changes_nothing(world):
    model, opt = _make(mode="diloco", sync_every=4)
    for t in range(5):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
    opt.flush()
    once = [p.detach().clone() for p in model.parameters()]
    opt.flush()
    assert all(torch.equal(a, p) for a, p in zip(once, model.parameters()))


@pytest.mark.parametrize("mode,knobs", [
    ("local_sgd", dict(sync_every=3)),
    ("local_sgd", dict(sync_every=4, fragments=2, fragment_sync_delay=1,
                       compression=dadt.Compression.int8)),
    ("diloco", dict(sync_every=4, fragments=2, fragment_sync_delay=1)),
    ("easgd", dict(sync_every=3, asynchronous=True)),
], ids=["local_sgd", "local_sgd-streaming-int8", "diloco-streaming", "easgd-async"])
def test_resume_from_state_dict_is_bit_exact(world, mode, knobs):
    """Training 9 steps straight equals 5 steps, state_dict() through torch.save, a new model and
    optimizer loading it, 4 more steps: to the bit, with an exchange in flight at the save."""
    model, opt = _make(momentum=0.5, mode=mode, **knobs)
    model2, opt2 = _make(momentum=0.5, mode=mode, **knobs)
    ref_model, ref = _make(momentum=0.5, mode=mode, **knobs)
    for t in range(9):
        ref.zero_grad()
        ref_model(_grad(world.rank, t)).backward()
        ref.step()
    expected = [p.detach().clone() for p in ref_model.parameters()]
    ref.flush()  # its exchange in flight would share its name with the resumed run's
    for t in range(5):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    saved = torch.load(buf, weights_only=False)
    model2.load_state_dict(saved["model"])
    opt2.load_state_dict(saved["opt"])
    for t in range(5, 9):
        opt2.zero_grad()
        model2(_grad(world.rank, t)).backward()
        opt2.step()
    for a, b in zip(model2.parameters(), expected):
        assert torch.equal(a, b), (mode, a, b)


def test_broadcast_optimizer_state_gives_roots_exchange_state(world, nm):
    """A rank that takes root's model and optimizer state (as after an elastic reset) continues
    exactly as root: the last synced weights and the outer optimizer's momentum included."""
    model, opt = _make(mode="diloco", sync_every=2)
    for t in range(5):  # two exchanges, then one inner step: ranks differ now
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
    dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    dadt.broadcast_optimizer_state(opt, root_rank=0)
    for t in range(5, 8):  # every rank on rank 0's data: the models must stay equal
        opt.zero_grad()
        model(_grad(0, t)).backward()
        opt.step()
    rows = gather_rows(torch.cat([p.detach().reshape(-1) for p in model.parameters()]), name=nm("rows"))
    assert_rows_identical(rows, "weights after broadcast_optimizer_state")


def test_exchanges_only_every_sync_every_steps(world):
    _, _, opt = _train(world, "local_sgd", 8, flush=False, sync_every=4)
    model_bytes = 5 * 8
    expected = 2 * model_bytes if world.size > 1 else 0  # s = 4 and 8
    assert opt.bytes_sent == expected


@pytest.mark.parametrize("mode", ["diloco", "local_sgd"])
def test_int8_sends_a_quarter_and_every_rank_ends_the_same(world, mode):
    model, opt = _make(mode=mode, sync_every=2, compression=dadt.Compression.int8)
    for t in range(4):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
    if world.size > 1:
        assert opt.bytes_sent == 2 * (5 + 4)  # int8 values + the scale, twice
    opt.flush()
    rows = gather_rows(torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
                       name="periodic.int8.final.%s" % mode)
    assert_rows_identical(rows, "weights after flush()")


def test_bad_options_are_refused_by_name():
    model = _Dots()

    def make(**kw):
        return dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR),
                                         named_parameters=model.named_parameters(), **kw)
    with pytest.raises(ValueError, match="sync_every"):
        make(mode="diloco")
    with pytest.raises(ValueError, match="sync_every.*not of mode='sync'"):
        make(sync_every=4)
    with pytest.raises(ValueError, match="outer_optimizer is not an option of mode='local_sgd'"):
        make(mode="local_sgd", sync_every=4, outer_optimizer=torch.optim.SGD(model.parameters(), lr=1))
    with pytest.raises(ValueError, match="fragment_sync_delay must be less than"):
        make(mode="diloco", sync_every=4, fragments=2, fragment_sync_delay=2)
    with pytest.raises(ValueError, match="fragments=3 but the model has 2 parameters"):
        make(mode="diloco", sync_every=4, fragments=3)
    with pytest.raises(ValueError, match="same parameters"):
        make(mode="diloco", sync_every=4, outer_optimizer=torch.optim.SGD([model.w1], lr=1))
    with pytest.raises(ValueError, match="Compression.int8 is for mode='diloco'"):
        make(mode="sync", compression=dadt.Compression.int8)
    with pytest.raises(ValueError, match="averages the weights themselves"):
        make(mode="easgd", sync_every=2, compression=dadt.Compression.fp16)
    with pytest.raises(ValueError, match="averages the model across ranks; op= must be Average"):
        make(mode="local_sgd", sync_every=2, op=dadt.Sum)
    with pytest.raises(ValueError, match="moving_rate"):
        make(mode="easgd", sync_every=2, moving_rate=1.5)


def test_process_set_averages_within_the_set(world, nm):
    """Two halves of the ranks each average among themselves; a rank alone trains alone."""
    if world.size < 2:
        pytest.skip("needs 2 ranks")
    half = [r for r in range(world.size) if r % 2 == world.rank % 2]
    sets = [dadt.add_process_set([r for r in range(world.size) if r % 2 == k]) for k in (0, 1)]
    try:
        mine = sets[world.rank % 2]
        model, opt = _make(mode="local_sgd", sync_every=2, process_set=mine)
        for t in range(4):
            opt.zero_grad()
            model(_grad(world.rank, t)).backward()
            opt.step()
        got = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        expected = torch.zeros(5, dtype=torch.float64)
        for t in range(4):
            expected = expected - LR * sum(_grad(r, t) for r in half) / len(half)
        assert torch.allclose(got, expected, rtol=1e-12, atol=1e-12), (half, got, expected)
    finally:
        for s in sets:
            dadt.remove_process_set(s)


def test_hierarchical_local_sgd_syncs_within_a_host_and_averages_across(world, monkeypatch):
    """Ranks 2k and 2k+1 play one host (DADT_HOSTNAME, as dadtrun sets it per host): they average
    their gradients every step; every 3 steps all ranks average their weights."""
    from dadt.common import process_sets
    host = lambda r: "host%d" % (r // 2)  # noqa: E731
    monkeypatch.setenv("DADT_HOSTNAME", host(world.rank))
    before = set(process_sets._registered)
    try:
        _check_hierarchical(world, host)
    finally:  # the host sets the optimizer registered: later tests register their own
        for set_id in sorted(set(process_sets._registered) - before):
            dadt.remove_process_set(process_sets._registered[set_id][0])


def _check_hierarchical(world, host):
    model, opt = _make(mode="local_sgd", sync_every=3, hierarchical=True)
    x = [torch.zeros(5, dtype=torch.float64) for _ in range(world.size)]
    for t in range(7):
        opt.zero_grad()
        model(_grad(world.rank, t)).backward()
        opt.step()
        for r in range(world.size):
            mates = [q for q in range(world.size) if host(q) == host(r)]
            x[r] = x[r] - LR * sum(_grad(q, t) for q in mates) / len(mates)
        if (t + 1) % 3 == 0:
            x = [sum(x) / world.size] * world.size
        got = torch.cat([model.w1.detach(), model.w2.detach()])
        assert torch.allclose(got, x[world.rank], rtol=1e-12, atol=1e-12), (t, got, x[world.rank])
    opt.flush()
    opt._engine.remove_hooks()
