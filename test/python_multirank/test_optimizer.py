"""DistributedOptimizer: data-parallel SGD steps equal a single-process step on the averaged gradient."""
import pytest
import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook

import dadt.torch as dadt
from dadt.torch.training_modes import sync as sync_module
from dadt.torch.training_modes.host import EngineHost
from collective_utils import assert_rows_identical, gather_rows

STEPS = 3


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _batch(rank, step, micro=0):
    """Different data on every rank, reproducible anywhere."""
    g = torch.Generator().manual_seed(1000 * rank + 10 * step + micro)
    x = torch.randn(8, 10, generator=g)
    y = torch.randint(0, 4, (8,), generator=g)
    return x, y


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _distributed_run(world, compression=dadt.Compression.none, passes=1, op=dadt.Average):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = dadt.DistributedOptimizer(opt, named_parameters=model.named_parameters(), compression=compression,
                                    backward_passes_per_step=passes, op=op)
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(passes):
            x, y = _batch(world.rank, step, micro)
            F.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt


def _reference_run(world, passes=1, op_sum=False):
    """One process: the gradient of the mean over ranks (sum over micro-batches, as autograd accumulates)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        opt.zero_grad()
        total = 0
        for r in range(world.size):
            for micro in range(passes):
                x, y = _batch(r, step, micro)
                total = total + F.cross_entropy(model(x), y)
        (total if op_sum else total / world.size).backward()
        opt.step()
    return model


def test_sync_training_bit_identical_and_matches_reference(world, nm):
    model, opt = _distributed_run(world)
    rows = gather_rows(_flat(model), nm())
    assert_rows_identical(rows, "weights after DistributedOptimizer steps")
    ref = _flat(_reference_run(world))
    assert torch.allclose(_flat(model), ref, rtol=1e-5, atol=1e-6), (
        f"max |distributed - reference| = {(_flat(model) - ref).abs().max().item():.3g}")
    assert isinstance(opt, torch.optim.SGD), "DistributedOptimizer keeps the wrapped optimizer's class"


def test_weights_actually_change(world, nm):
    before = _flat(_model())
    model, _ = _distributed_run(world)
    assert not torch.equal(before, _flat(model))


def test_backward_passes_per_step_2(world, nm):
    model, _ = _distributed_run(world, passes=2)
    rows = gather_rows(_flat(model), nm())
    assert_rows_identical(rows, "weights with backward_passes_per_step=2")
    ref = _flat(_reference_run(world, passes=2))
    assert torch.allclose(_flat(model), ref, rtol=1e-5, atol=1e-6), (
        f"max |distributed - reference| = {(_flat(model) - ref).abs().max().item():.3g}")


def test_op_sum(world, nm):
    model, _ = _distributed_run(world, op=dadt.Sum)
    rows = gather_rows(_flat(model), nm())
    assert_rows_identical(rows, "weights with op=Sum")
    ref = _flat(_reference_run(world, op_sum=True))
    assert torch.allclose(_flat(model), ref, rtol=1e-5, atol=1e-6)


def test_fp16_compression_close_to_none(world, nm):
    plain, _ = _distributed_run(world)
    compressed, _ = _distributed_run(world, compression=dadt.Compression.fp16)
    rows = gather_rows(_flat(compressed), nm())
    assert_rows_identical(rows, "weights with fp16 compression")
    assert _flat(compressed).dtype is torch.float32
    diff = (_flat(compressed) - _flat(plain)).abs().max().item()
    assert diff < 2e-3, f"fp16 compression moved weights by {diff:.3g}"
    assert torch.allclose(_flat(compressed), _flat(plain), rtol=1e-2, atol=2e-3)


def test_bf16_compression_close_to_none(world, nm):
    plain, _ = _distributed_run(world)
    compressed, _ = _distributed_run(world, compression=dadt.Compression.bf16)
    rows = gather_rows(_flat(compressed), nm())
    assert_rows_identical(rows, "weights with bf16 compression")
    assert _flat(compressed).dtype is torch.float32
    diff = (_flat(compressed) - _flat(plain)).abs().max().item()
    assert diff < 1e-2, f"bf16 compression moved weights by {diff:.3g}"


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.Adagrad], ids=lambda c: c.__name__)
def test_other_optimizers_stay_in_sync(world, nm, opt_cls):
    model = _model()
    opt = dadt.DistributedOptimizer(opt_cls(model.parameters(), lr=0.01), named_parameters=model.named_parameters())
    for step in range(STEPS):
        opt.zero_grad()
        x, y = _batch(world.rank, step)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    rows = gather_rows(_flat(model), nm())
    assert_rows_identical(rows, f"weights with {opt_cls.__name__}")


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(10, 8)
        self.heads = torch.nn.ModuleList([torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)])
        self.unused = torch.nn.Linear(3, 3)  # never used by anyone

    def forward(self, x, head):
        return self.heads[head](torch.tanh(self.body(x)))


def test_parameters_without_gradient_on_some_ranks(world, nm):
    """Rank r trains only head r % 2: the other head has no gradient there, yet every rank must agree."""
    torch.manual_seed(3)
    model = _TwoHeads()
    opt = dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters())
    for step in range(STEPS):
        opt.zero_grad()
        x, y = _batch(world.rank, step)
        F.cross_entropy(model(x, world.rank % 2), y).backward()
        opt.step()
    rows = gather_rows(_flat(model), nm())

    torch.manual_seed(3)
    ref = _TwoHeads()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(STEPS):
        ref_opt.zero_grad()
        total = sum(F.cross_entropy(ref(*_batch_pair(r, step)), _batch(r, step)[1]) for r in range(world.size))
        (total / world.size).backward()
        ref_opt.step()
    assert_rows_identical(rows, "weights with rank-dependent unused parameters")
    assert torch.allclose(_flat(model), _flat(ref), rtol=1e-5, atol=1e-6), (
        f"max |distributed - reference| = {(_flat(model) - _flat(ref)).abs().max().item():.3g}")


def _batch_pair(rank, step):
    return _batch(rank, step)[0], rank % 2


_BASE_STEP_ON = EngineHost.base_step_on


class _ClippingSGD(torch.optim.SGD):
    """A step() that reads every gradient at once (a global norm): not separable."""

    def step(self, closure=None):
        torch.nn.utils.clip_grad_norm_([p for g in self.param_groups for p in g["params"]], 1.0)
        return super().step(closure)


def _overlap_run(world, monkeypatch, opt_factory, overlap):
    """STEPS steps of a model with several parameter tensors; returns (weights, how many partial
    steps the optimizer ran)."""
    monkeypatch.setenv("DADT_OVERLAP_STEP", "1" if overlap else "0")
    # A part per gradient: no minimum size, and no allreduce counts as done before it is waited
    # for (the split otherwise depends on timing).
    monkeypatch.setattr(sync_module, "APPLY_BYTES", 0)
    monkeypatch.setattr(sync_module, "_done", lambda handle: False)
    parts = []
    monkeypatch.setattr(EngineHost, "base_step_on",
                        lambda self, params: parts.append(len(params)) or _BASE_STEP_ON(self, params))
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                                torch.nn.Tanh(), torch.nn.Linear(32, 4))
    opt = dadt.DistributedOptimizer(opt_factory(model.parameters()),
                                    named_parameters=model.named_parameters())
    for step in range(STEPS):
        opt.zero_grad()
        x, y = _batch(world.rank, step)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return _flat(model), parts


@pytest.mark.parametrize("opt_factory", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.Adam(ps, lr=0.01),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
], ids=["SGD", "Adam", "AdamW"])
def test_step_overlapped_with_the_allreduces_gives_the_same_bits(world, nm, monkeypatch, opt_factory):
    """step() steps the parameters whose averages have arrived while the others are still being
    reduced; for torch's elementwise optimizers that must be exactly one step's result."""
    together, no_parts = _overlap_run(world, monkeypatch, opt_factory, overlap=False)
    overlapped, parts = _overlap_run(world, monkeypatch, opt_factory, overlap=True)
    assert no_parts == [], "DADT_OVERLAP_STEP=0 still stepped in parts"
    if world.size > 1:
        assert parts == [1] * (STEPS * 6), f"not one part per gradient, each once a step: {parts}"
    assert torch.equal(together, overlapped), (
        f"max |overlapped - one step| = {(together - overlapped).abs().max().item():.3g}")
    assert_rows_identical(gather_rows(overlapped, nm()), "weights with the overlapped step")


def test_step_of_an_optimizer_that_reads_every_gradient_is_not_split(world, nm, monkeypatch):
    """A step() of the user's own (a global gradient norm here), or any step hook, runs once on
    the averaged gradients, as without the overlap."""
    _, parts = _overlap_run(world, monkeypatch, lambda ps: _ClippingSGD(ps, lr=0.1), overlap=True)
    assert parts == []

    handle = register_optimizer_step_post_hook(lambda *args: None)
    try:
        _, parts = _overlap_run(world, monkeypatch, lambda ps: torch.optim.SGD(ps, lr=0.1), overlap=True)
    finally:
        handle.remove()
    assert parts == []
