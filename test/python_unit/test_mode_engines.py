"""The training-mode engines against their interface (dadt.torch.training_modes), in one process.

Each engine is driven through a bare EngineHost stand-in, not a DistributedOptimizer: what the
stand-in does not offer, an engine cannot use. The runtime runs as rank 0 of 1 (no launcher), so
the collectives are real but trivial; test/python_multirank/test_training_modes.py covers several ranks.
"""
import ast
import os

import pytest
import torch

import dadt.torch as dadt
from dadt.torch import training_modes
from dadt.torch.training_modes import (DEFAULT_BUCKET_BYTES, ENGINES, MODES, EngineHost,
                                       ModeEngine, default_bucket_bytes, shard_rows)

_PACKAGE = os.path.dirname(training_modes.__file__)


@pytest.fixture(scope="module")
def runtime():
    dadt.init()
    yield
    dadt.shutdown()


class _Host:
    """EngineHost's documented surface and nothing else, over a plain torch optimizer."""

    def __init__(self, optimizer, names):
        self.param_groups = optimizer.param_groups
        self.op = dadt.Average
        self.backward_passes_per_step = 1
        self.sparse_as_dense = False
        self._optimizer = optimizer
        self._names = names
        self.base_steps = 0

    process_set = None  # the global set
    compression = dadt.Compression.none

    def reducing_ranks(self):
        return dadt.size()

    def name_of(self, p):
        return self._names[p]

    def reduction(self):
        return self.op, 1.0, 1.0

    def compress(self, tensor):
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor

    def base_step(self, *args):
        self.base_steps += 1
        return self._optimizer.step(*args)

    base_step_on = EngineHost.base_step_on  # restricts param_groups around _base_step

    def _base_step(self):
        return self.base_step()

    def step_is_separable(self):
        return True


def _setup(mode, **options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.5)
    host = _Host(sgd, {p: n for n, p in model.named_parameters()})
    params = [p for g in sgd.param_groups for p in g["params"]]
    engine = ENGINES[mode].create(host, params, model=model,
                                  bucket_bytes=options.get("bucket_bytes"), groups=None)
    return model, host, engine


def _backward(model, x):
    model(x).sum().backward()


def _weights(model):
    return [p.detach().clone() for p in model.parameters()]


def test_every_mode_has_an_engine_that_implements_the_interface():
    assert MODES == ("sync", "async", "dear", "local_sgd", "diloco", "easgd", "hogwild", "gossip")
    assert tuple(ENGINES) == MODES
    for mode, cls in ENGINES.items():
        assert issubclass(cls, ModeEngine) and cls.name == mode
        for method in ("create", "step", "synchronize"):
            assert getattr(cls, method) is not getattr(ModeEngine, method), (mode, method)


def test_engines_ask_the_optimizer_only_through_the_host():
    """No engine module reads a private attribute of its host or imports the optimizer."""
    public = {n for n in dir(EngineHost) if not n.startswith("_")}
    for name in os.listdir(_PACKAGE):
        if not name.endswith(".py") or name == "host.py":
            continue
        tree = ast.parse(open(os.path.join(_PACKAGE, name)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "_host":
                assert node.attr in public, "%s: _host.%s" % (name, node.attr)
            if isinstance(node, ast.ImportFrom):
                assert node.module != "dadt.torch.optimizer", name


@pytest.mark.parametrize("mode,options,message", [
    ("async", dict(backward_passes_per_step=2), "backward_passes_per_step must be 1"),
    ("dear", dict(model=torch.nn.Linear(1, 1), groups=2), "groups is a mode='sync' option"),
    ("dear", dict(model=None), "needs the model"),
])
def test_engines_refuse_the_options_they_cannot_take(mode, options, message):
    kwargs = dict(model=None, backward_passes_per_step=1, groups=None)
    kwargs.update(options)
    with pytest.raises(ValueError, match=message):
        ENGINES[mode].check_options(**kwargs)
    ENGINES["sync"].check_options(**kwargs)  # sync takes them all


def test_shard_rows_follow_the_runtime_rule():
    # 7 rows over 3 ranks: the first 7 % 3 ranks get one more row
    assert [shard_rows(7, 3, r) for r in range(3)] == [(0, 3), (3, 2), (5, 2)]
    assert [shard_rows(2, 4, r) for r in range(4)] == [(0, 1), (1, 1), (2, 0), (2, 0)]
    assert shard_rows(0, 2, 1) == (0, 0)
    with pytest.raises(ValueError, match="bad arguments"):
        shard_rows(4, 2, 2)


@pytest.mark.parametrize("value,expected", [(None, DEFAULT_BUCKET_BYTES),
                                            ("", DEFAULT_BUCKET_BYTES),
                                            ("0", 0), ("1048576", 1048576)])
def test_bucket_bytes_default_to_the_fusion_threshold(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("DADT_FUSION_THRESHOLD", raising=False)
    else:
        monkeypatch.setenv("DADT_FUSION_THRESHOLD", value)
    assert default_bucket_bytes() == expected


@pytest.mark.parametrize("value", ["1e6", "-1", "64MB", "1.5"])
def test_a_fusion_threshold_the_runtime_refuses_is_refused_alike(monkeypatch, value):
    monkeypatch.setenv("DADT_FUSION_THRESHOLD", value)
    with pytest.raises(ValueError, match=r"DADT_FUSION_THRESHOLD='%s' is not a number of bytes: "
                                         r"it takes an integer >= 0" % value.replace(".", r"\.")):
        default_bucket_bytes()


def test_sync_engine_applies_this_steps_gradients(runtime):
    model, host, engine = _setup("sync")
    before = _weights(model)
    _backward(model, torch.ones(2, 3))
    grads = [p.grad.clone() for p in model.parameters()]
    engine.step(None, should_synchronize=True)
    assert host.base_steps == 1
    for w0, w1, g in zip(before, model.parameters(), grads):
        assert torch.allclose(w1, w0 - 0.5 * g)
    engine.flush()  # nothing held back
    assert host.base_steps == 1


def test_async_engine_applies_the_previous_steps_gradients(runtime):
    model, host, engine = _setup("async", bucket_bytes=0)
    before = _weights(model)
    _backward(model, torch.ones(2, 3))
    engine.step(None, should_synchronize=True)
    assert host.base_steps == 0 and all(torch.equal(a, b) for a, b in zip(before, _weights(model)))
    assert set(engine.checkpoint_state()) == {training_modes.PENDING_KEY}
    engine.flush()  # applies step 0's average
    assert host.base_steps == 1
    assert not all(torch.equal(a, b) for a, b in zip(before, _weights(model)))
    with pytest.raises(ValueError, match="step\\(closure\\) is not supported"):
        engine.step(lambda: 0.0, should_synchronize=True)
    with pytest.raises(RuntimeError, match="skip_synchronize\\(\\) is a mode='sync' pattern"):
        engine.step(None, should_synchronize=False)
    engine.remove_hooks()


def test_dear_engine_defers_each_update_to_the_forward_pass(runtime):
    model, host, engine = _setup("dear", bucket_bytes=0)
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    reference.load_state_dict(model.state_dict())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    x = torch.arange(6, dtype=torch.float32).view(2, 3)
    for _ in range(3):
        _backward(model, x)
        engine.step(None, should_synchronize=True)
        _backward(reference, x)
        ref_opt.step()
        ref_opt.zero_grad()
        for p in model.parameters():
            p.grad = None
    engine.synchronize()  # the last step's updates, still deferred
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)
    engine.remove_hooks()
