"""DistributedOptimizer's training modes: async (staleness exactly one step) and dear (sync's maths).

Every rank runs every test; the data differ by rank, so a rank that skipped the averaging would
diverge from the others and from the expected values.
"""
import copy
import re

import pytest
import torch
import torch.nn.functional as F

import dadt.torch as dadt
from collective_utils import assert_rows_identical, gather_rows


class _Dot(torch.nn.Module):
    """loss = <w, x>: the gradient is x, whatever w is, so every update can be computed by hand."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))

    def forward(self, x):
        return (self.w * x).sum()


def _dot_grad(rank, step):
    """Rank r's gradient at step t; the average over ranks is (t + 1) * (size + 1) / 2 * [1, 2, 4]."""
    return torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64) * (rank + 1) * (step + 1)


def _dot_average(size, step):
    return sum(_dot_grad(r, step) for r in range(size)) / size


def test_async_applies_previous_steps_average_exactly(world):
    model = _Dot()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                    named_parameters=model.named_parameters(), mode="async",
                                    model=model)
    steps = 5
    seen = []
    for t in range(steps):
        opt.zero_grad()
        model(_dot_grad(world.rank, t)).backward()
        opt.step()
        seen.append(model.w.detach().clone())
    opt.synchronize()
    final = model.w.detach().clone()
    opt.synchronize()  # nothing left: a second flush changes nothing
    again = model.w.detach().clone()

    expected = torch.zeros(3, dtype=torch.float64)
    for t in range(steps):
        # step t applies the average of step t-1's gradients; step 0 applies nothing
        if t > 0:
            expected = expected - _dot_average(world.size, t - 1)
        assert torch.allclose(seen[t], expected, rtol=1e-12, atol=0), (t, seen[t], expected)
    expected = expected - _dot_average(world.size, steps - 1)  # the last step's, by synchronize()
    assert torch.allclose(final, expected, rtol=1e-12, atol=0), (final, expected)
    assert torch.equal(again, final)


def test_async_first_step_leaves_optimizer_state_untouched(world):
    model = _Dot()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9,
                                                    weight_decay=0.1),
                                    named_parameters=model.named_parameters(), mode="async")
    model(_dot_grad(world.rank, 0)).backward()
    opt.step()
    state_after_first = len(opt.state)
    w_after_first = model.w.detach().clone()
    opt.zero_grad()
    model(_dot_grad(world.rank, 1)).backward()
    opt.step()  # applies step 0's average: the momentum buffer starts from it
    buf = opt.state[model.w]["momentum_buffer"].clone()
    opt.flush()

    assert state_after_first == 0
    assert torch.equal(w_after_first, torch.zeros(3, dtype=torch.float64))
    # torch's SGD: d = g + wd * w with w = 0, buf = d on its first step
    assert torch.allclose(buf, _dot_average(world.size, 0), rtol=1e-12, atol=0)


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 24),
                               torch.nn.ReLU(), torch.nn.Linear(24, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 5))


class _ConvNet(torch.nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 8, 8))), 2)
        return self.fc(F.relu(self.conv2(x)).flatten(1))


def _batch(rank, step, features=12):
    g = torch.Generator().manual_seed(7919 * rank + 31 * step + 1)
    return torch.randn(16, features, generator=g), torch.randint(0, 5, (16,), generator=g)


def _train(model, opt, rank, steps, features=12, start=0):
    for t in range(start, start + steps):
        x, y = _batch(rank, t, features)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _optimizer(kind, model):
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    return torch.optim.Adam(model.parameters(), lr=1e-2)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("net", ["mlp", "cnn"])
def test_dear_weights_equal_sync(world, nm, kind, net):
    make, features = (_mlp, 12) if net == "mlp" else (_ConvNet, 64)
    runs = {}
    for mode in ("sync", "dear"):
        model = make()
        # 1 KiB buckets: several buckets, so the reduce-scatters and all-gathers pipeline
        opt = dadt.DistributedOptimizer(_optimizer(kind, model),
                                        named_parameters=model.named_parameters(), mode=mode,
                                        model=model, bucket_bytes=1024)
        if mode == "dear":
            assert len(opt._engine.buckets) >= 3
        _train(model, opt, world.rank, 20, features)
        opt.synchronize()
        runs[mode] = _flat(model)
    rows = gather_rows(runs["dear"], nm("rows"))

    assert_rows_identical(rows)
    assert not torch.equal(runs["sync"], _flat(make()))  # it trained
    diff = (runs["dear"] - runs["sync"]).abs().max() / runs["sync"].abs().max()
    assert diff <= 1e-5, "dear differs from sync by %.3g (relative)" % diff


def test_dear_forward_sees_the_update_of_the_last_step(world):
    """After step() the update is deferred; the next forward (here an eval) applies it."""
    outputs = {}
    for mode in ("sync", "dear"):
        model = _mlp()
        opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        named_parameters=model.named_parameters(), mode=mode,
                                        model=model, bucket_bytes=0)
        _train(model, opt, world.rank, 3)
        with torch.no_grad():
            outputs[mode] = model(_batch(0, 99)[0])
        opt.synchronize()
    assert torch.allclose(outputs["dear"], outputs["sync"], rtol=1e-5, atol=1e-6)


def test_async_checkpoint_resume_is_exact(world):
    """state_dict() carries the pending average: resuming from it equals never stopping."""
    model = _mlp()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                    named_parameters=model.named_parameters(), mode="async",
                                    model=model)
    _train(model, opt, world.rank, 4)
    checkpoint = (copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict()))
    _train(model, opt, world.rank, 3, start=4)
    opt.flush()
    uninterrupted = _flat(model)

    resumed_model = _mlp(seed=1)
    resumed_model.load_state_dict(checkpoint[0])
    resumed = dadt.DistributedOptimizer(torch.optim.SGD(resumed_model.parameters(), lr=0.05,
                                                        momentum=0.9),
                                        named_parameters=resumed_model.named_parameters(),
                                        mode="async", model=resumed_model)
    resumed.load_state_dict(checkpoint[1])
    _train(resumed_model, resumed, world.rank, 3, start=4)
    resumed.flush()

    assert checkpoint[1]["dadt_async_pending"]["buckets"] is not None
    assert torch.equal(_flat(resumed_model), uninterrupted)


def test_async_broadcast_optimizer_state_shares_the_pending_average(world, nm):
    """Rank 0's pending average reaches a rank that starts fresh from broadcast state."""
    model = _mlp()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                    named_parameters=model.named_parameters(), mode="async",
                                    model=model)
    _train(model, opt, world.rank, 3)
    if world.rank != 0:  # a restarted rank: new weights, new optimizer, nothing pending
        opt.flush()
        model = _mlp(seed=5)
        opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                        named_parameters=model.named_parameters(), mode="async",
                                        model=model)
    dadt.broadcast_parameters(model.state_dict(), root_rank=0)
    dadt.broadcast_optimizer_state(opt, root_rank=0)
    _train(model, opt, world.rank, 2, start=3)
    opt.flush()
    assert_rows_identical(gather_rows(_flat(model), nm("rows")))


@pytest.mark.parametrize("kwargs,message", [
    (dict(mode="fast"), "mode must be one of"),
    (dict(mode="dear"), "needs the model"),
    (dict(mode="async", backward_passes_per_step=2), "backward_passes_per_step must be 1"),
    (dict(mode="dear", groups=2, model=torch.nn.Linear(1, 1)), "groups is a mode='sync' option"),
    (dict(mode="async", bucket_bytes=-1), "bucket_bytes must be an int >= 0"),
])
def test_bad_mode_arguments_are_refused(kwargs, message):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match=message):
        dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), **kwargs)


def _finish_refused_step(opt):
    """After a refused step: completes what every rank has in flight, alike on every rank. A
    gradient that the refused pass changed while it was lent is refused once more on the way."""
    for _ in range(len(opt._engine.buckets) + 1):
        try:
            opt.synchronize()
            return
        except RuntimeError as e:
            assert "changed in place while this mode was still reducing it" in str(e), e
    raise AssertionError("synchronize() kept refusing")


def test_dear_refuses_two_backward_passes_per_step(world):
    model = _mlp()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), mode="dear",
                                    model=model)
    x, y = _batch(world.rank, 0)
    F.cross_entropy(model(x), y).backward()
    with pytest.raises(RuntimeError, match="computed twice before step"):
        F.cross_entropy(model(x), y).backward()
    # The refused backward had already added to a gradient that the first one produced.
    with pytest.raises(RuntimeError, match="changed in place after backward produced it"):
        opt.step()
    opt.step()  # the buckets that completed are in flight on every rank: finish them
    _finish_refused_step(opt)


class _ReadsOutside(torch.nn.Module):
    """Uses fc's parameters in its own forward, not through fc: dear cannot update them in time."""

    def __init__(self):
        super().__init__()
        self.l0, self.fc, self.l1 = torch.nn.Linear(12, 8), torch.nn.Linear(8, 5), torch.nn.Linear(5, 5)

    def forward(self, x):
        return self.l1(F.linear(self.l0(x), self.fc.weight, self.fc.bias))


def test_dear_refuses_a_parameter_read_outside_its_module(world):
    # fc's forward never runs, so nothing applies its update before the forward reads it. Whether
    # its all-gather is still running when l0 runs (the update stays deferred) or already done
    # (l0's hook applies it with l0's own, ahead of fc), the gradient that reaches it names fc.
    import time
    model = _ReadsOutside()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), mode="dear",
                                    model=model, bucket_bytes=0)
    _train(model, opt, world.rank, 1)
    time.sleep(0.3)  # lets the all-gathers finish: l0's hook then applies fc's buckets too
    x, y = _batch(world.rank, 1)
    opt.zero_grad()
    with pytest.raises(RuntimeError, match=r"parameter 'fc\.(weight|bias)' got a gradient while its "
                                           r"update from the previous step was still deferred"):
        F.cross_entropy(model(x), y).backward()
    opt.step()  # every rank stopped at the same gradient: finish the buckets alike
    opt.synchronize()


@pytest.mark.parametrize("mode", ["async", "dear"])
def test_fp16_compression_of_buckets(world, mode):
    """Compression applies to each flat bucket: the result stays close to the uncompressed one."""
    runs = {}
    for compression in (dadt.Compression.none, dadt.Compression.fp16):
        model = _mlp()
        opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                        named_parameters=model.named_parameters(), mode=mode,
                                        model=model, bucket_bytes=2048, compression=compression)
        _train(model, opt, world.rank, 5)
        opt.flush()
        runs[compression] = _flat(model)
    reference = runs[dadt.Compression.none]
    assert torch.allclose(runs[dadt.Compression.fp16], reference, rtol=1e-2, atol=1e-3)
    assert not torch.equal(reference, _flat(_mlp()))


@pytest.mark.parametrize("mode", ["async", "dear"])
def test_a_large_gradient_is_reduced_where_autograd_left_it(world, nm, mode):
    """A parameter of bucket_bytes or more is a bucket of its own, reduced in its gradient tensor
    itself: no flat buffer is made for it, and after the update that tensor holds the average."""
    model = _mlp()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), mode=mode,
                                    model=model, bucket_bytes=1024)
    weight = model[2].weight  # 32 x 24 floats, 3 KiB
    x, y = _batch(world.rank, 0)
    plain = _mlp()  # the same weights, no optimizer: this rank's own gradient
    F.cross_entropy(plain(x), y).backward()
    expected = dadt.allreduce(plain[2].weight.grad, name=nm("expected"), op=dadt.Average)
    F.cross_entropy(model(x), y).backward()
    grad = weight.grad  # its collective has started: reading it now would race
    opt.step()
    opt.synchronize()
    bucket, _ = opt._engine.bucket_of(weight)
    assert bucket.params == [weight] and bucket._buffers == [None] * bucket.copies
    assert weight.grad is grad
    assert torch.allclose(grad, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["async", "dear"])
def test_zero_grad_keeping_the_tensors_changes_nothing(world, mode):
    """zero_grad(set_to_none=False) while the mode still reduces the large gradients in place:
    the optimizer hands those parameters fresh zeros, and the weights are those of
    zero_grad(set_to_none=True)."""
    runs = {}
    for set_to_none in (True, False):
        model = _mlp()
        opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                        named_parameters=model.named_parameters(), mode=mode,
                                        model=model, bucket_bytes=1024)
        for t in range(5):
            x, y = _batch(world.rank, t)
            opt.zero_grad(set_to_none=set_to_none)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        opt.synchronize()
        runs[set_to_none] = _flat(model)
    assert torch.equal(runs[False], runs[True])


@pytest.mark.parametrize("mode", ["async", "dear"])
def test_a_gradient_zeroed_under_the_reduction_is_refused(world, mode):
    """model.zero_grad(set_to_none=False) bypasses the optimizer and writes zeros into gradients
    the mode is still reducing (dear: all-gathering; async: allreducing, then waiting for the next
    step): applying them says so."""
    model = _mlp()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), mode=mode,
                                    model=model, bucket_bytes=1024)
    _train(model, opt, world.rank, 1)
    model.zero_grad(set_to_none=False)
    refused = []
    for _ in range(4):  # dear: each refusal ends one bucket; the others stay deferred
        try:
            opt.synchronize()
            break
        except RuntimeError as e:
            found = re.search(r"mode='%s': the gradient of '(.+?)' was changed in place while this "
                              r"mode was still reducing it" % mode, str(e))
            assert found, e
            refused.append(found.group(1))
    # Linear(16, 5)'s weight (320 bytes) shares a bucket with the biases, and was copied. async
    # refuses the first and drops the rest of that average. dear refuses them in the order in
    # which their all-gathers finish (two run at a time).
    expected = ["0.weight", "2.weight", "4.weight"] if mode == "dear" else ["0.weight"]
    assert sorted(refused) == expected


@pytest.mark.parametrize("mode", ["async", "dear"])
def test_modes_refuse_a_gradient_changed_after_backward(world, mode):
    """Clipping between backward and step cannot reach the update in these modes (each gradient
    is taken as autograd produces it): step() refuses it rather than ignore it."""
    model = _mlp()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters(), mode=mode,
                                    model=model, bucket_bytes=1024)
    x, y = _batch(world.rank, 0)
    F.cross_entropy(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
    with pytest.raises(RuntimeError, match=r"mode='%s': the gradient of '.+' was changed in place "
                                           r"after backward produced it" % mode):
        opt.step()
    opt.step()  # the buckets started in backward are in flight on every rank: finish them
    _finish_refused_step(opt)  # dear also refuses each clipped gradient it lent
