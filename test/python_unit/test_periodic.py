"""The framework-neutral parts of the modes that send less (dadt.common.periodic and the rules),
in one process: the schedule, the knobs, int8 quantization with error feedback, the outer
optimizer, fragments, and an Exchanger run by three ranks as threads over an in-process
collective, compared with the equations."""
import threading

import pytest
import torch

from dadt.common import periodic
from dadt.common.diloco import DiLoCoRule, NesterovOuter
from dadt.common.local_sgd import LocalSGDRule
from dadt.torch.training_modes.periodic import TorchOps


def test_schedule_staggers_fragments_and_starts_them_delay_steps_early():
    s = periodic.Schedule(sync_every=8, fragments=4, delay=1)
    table = {step: (s.starts(step), s.finishes(step)) for step in range(1, 17)}
    # fragment f finishes at s % 8 == ((f + 1) * 8 // 4) % 8: 2, 4, 6, 0
    assert [step for step in table if table[step][1]] == [2, 4, 6, 8, 10, 12, 14, 16]
    assert table[2] == ([], [0]) and table[8] == ([], [3]) and table[16] == ([], [3])
    assert table[1] == ([0], []) and table[7] == ([3], []) and table[9] == ([0], [])
    one = periodic.Schedule(sync_every=5)
    assert [step for step in range(1, 16) if one.finishes(step)] == [5, 10, 15]
    assert all(one.starts(step) == one.finishes(step) for step in range(1, 16))


@pytest.mark.parametrize("given,message", [
    ({}, "needs sync_every"),
    ({"sync_every": 0}, "sync_every must be an int >= 1"),
    ({"sync_every": 4, "fragments": 5}, "fragments must be between 1 and sync_every"),
    ({"sync_every": 8, "fragments": 4, "fragment_sync_delay": 2}, "less than sync_every // fragments \\(2\\)"),
    ({"sync_every": 4, "fragment_update_alpha": 2.0}, "fragment_update_alpha must be in"),
    ({"sync_every": 4, "moving_rate": 3}, "moving_rate is not an option of mode='diloco'"),
])
def test_knobs_are_checked_by_name(given, message):
    accepted = ("sync_every", "warmup_steps", "fragments", "fragment_sync_delay",
                "fragment_update_alpha")
    with pytest.raises(ValueError, match=message):
        periodic.check_knobs("diloco", given, accepted, ranks=2)


def test_easgd_moving_rate_defaults_to_0_9_over_the_ranks():
    knobs = periodic.check_knobs("easgd", {"sync_every": 2}, ("sync_every", "moving_rate"), 3)
    assert knobs["moving_rate"] == pytest.approx(0.3)


def test_nesterov_outer_is_torch_sgd_with_nesterov():
    theta = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    p = torch.nn.Parameter(theta.clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    outer = NesterovOuter(TorchOps(None))
    for k in range(4):
        delta = torch.tensor([0.3, -0.1, 0.2], dtype=torch.float64) * (k + 1)
        outer.step(0, theta, delta)
        p.grad = delta.clone()
        sgd.step()
        assert torch.allclose(theta, p.detach(), rtol=1e-15, atol=0), k


def test_int8_round_trip_and_its_error():
    ops = TorchOps(None)
    x = torch.tensor([0.5, -1.27, 0.003, 1.0])
    wire, seen = ops.quantize_int8(x)
    assert wire.dtype == torch.int8 and wire.numel() == 4 + 4
    back = ops.dequantize_int8_mean(wire, 1, x)
    assert torch.equal(back, seen)
    assert (x - seen).abs().max() <= 1.27 / 127 / 2 + 1e-7  # half a step at most
    two = torch.cat([wire, ops.quantize_int8(2 * x)[0]])
    assert torch.allclose(ops.dequantize_int8_mean(two, 2, x), 1.5 * x, atol=2 * 1.27 / 127)


def test_fragments_are_contiguous_runs_of_about_equal_bytes():
    nbytes = [100, 10, 10, 100, 50, 30]
    parts = periodic.split_by_bytes(nbytes, 3, "diloco")
    assert parts == [[0], [1, 2, 3], [4, 5]]  # closed at 100 >= 300/3 and 220 >= 2*300/3
    assert periodic.split_by_bytes(nbytes, 6, "diloco") == [[i] for i in range(6)]
    assert periodic.split_by_bytes([1, 1, 1, 100], 2, "diloco") == [[0, 1, 2], [3]]
    with pytest.raises(ValueError, match="fragments=7 but the model has 6 parameters"):
        periodic.split_by_bytes(nbytes, 7, "diloco")


class _ThreadWorld:
    """An allreduce/allgather among threads: each waits until every thread has put its part."""

    def __init__(self, size):
        self.size, self.parts, self.cond = size, {}, threading.Condition()
        self.calls = {}  # (rank, name) -> how many times the rank used the name

    def ops(self, rank):
        world = self

        class Ops(TorchOps):
            def allreduce_average_async(self, x, name):
                return world.put(name, rank, x.clone(), "mean")

            def allgather_async(self, x, name):
                return world.put(name, rank, x.clone(), "cat")

            def wait(self, handle):
                return world.get(*handle)
        return Ops(None)

    def put(self, name, rank, x, kind):
        with self.cond:
            n = self.calls[(rank, name)] = self.calls.get((rank, name), -1) + 1
            name = (name, n)
            self.parts.setdefault(name, {})[rank] = x
            self.cond.notify_all()
        return name, kind

    def get(self, name, kind):
        with self.cond:
            self.cond.wait_for(lambda: len(self.parts.get(name, {})) == self.size)
            xs = [self.parts[name][r] for r in range(self.size)]
        return torch.stack(xs).mean(0) if kind == "mean" else torch.cat(xs)


def _run_ranks(size, body):
    errors = []

    def wrap(rank):
        try:
            body(rank)
        except BaseException as e:  # noqa: BLE001 - re-raised on the main thread
            errors.append(e)
    threads = [threading.Thread(target=wrap, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


@pytest.mark.parametrize("compression", ["none", "bf16", "int8"])
def test_diloco_at_three_ranks_with_error_feedback(compression):
    """Three ranks as threads, each stepping x -= 0.1 * g_r: the weights after each exchange are
    the equations' (exact uncompressed; within the rounding of one exchange compressed, since
    the error fed back makes the sum of what was applied converge to the true sum)."""
    size, every, steps = 3, 2, 8
    grads = [torch.tensor([0.3, -0.7, 1.1, 0.05], dtype=torch.float32) * (r + 1) for r in range(size)]
    world = _ThreadWorld(size)
    got = {}

    def rank_body(rank):
        ops = world.ops(rank)
        outer = NesterovOuter(ops, lr=1.0, momentum=0.0)
        ex = periodic.Exchanger(DiLoCoRule(ops, outer), ops, periodic.Schedule(every), "t",
                                compression=compression, ranks=lambda: size)
        x = torch.zeros(4)
        for _ in range(steps):
            ex.before_step(lambda f: x.clone())
            x -= 0.1 * grads[rank]
            out = {}
            ex.after_step(lambda f: x.clone(), lambda f, v: out.setdefault("x", v))
            if "x" in out:
                x = out["x"].clone()
        got[rank] = x

    _run_ranks(size, rank_body)
    # outer SGD lr 1, no momentum: theta <- theta - mean(theta - x_r) = mean(x_r): plain averaging
    expected = -0.1 * steps * sum(grads) / size
    tol = 0 if compression == "none" else 2e-2
    for r in range(size):
        assert torch.allclose(got[r], expected, atol=tol + 1e-6), (compression, got[r], expected)
        assert torch.equal(got[r], got[0])


def test_local_sgd_rule_keeps_the_last_average_for_a_reset():
    ops = TorchOps(None)
    rule = LocalSGDRule(ops)
    ex = periodic.Exchanger(rule, ops, periodic.Schedule(2), "t")
    x = torch.zeros(2)
    for k in range(3):
        ex.before_step(lambda f: x.clone())
        x = x + 1
        ex.after_step(lambda f: x.clone(), lambda f, v: None)
    back = {}
    ex.reset(lambda f: x.clone(), lambda f, v: back.setdefault(f, v.clone()))
    assert torch.equal(back[0], torch.full((2,), 2.0))  # the average at s = 2
