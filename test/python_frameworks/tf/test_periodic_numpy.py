"""dadt.common.periodic_numpy's own parts (NumpyOps, fragments, the knob checks) under the launcher:

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_frameworks/tf/test_periodic_numpy.py
"""
import numpy as np
import pytest

import dadt.common.basics as basics
from dadt.common import periodic_numpy
from dadt.common.periodic_numpy import NumpyOps, check_mode, split_by_bytes
from periodic_reference import F32, _quantize


# ------------------------------------------------------------------------------------------------
# Tests of periodic_numpy's own parts.
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def dadt_session():
    if not basics.is_initialized():
        basics.init()
    yield


def test_split_by_bytes():
    assert split_by_bytes([4, 4], 2, "m") == [[0], [1]]
    assert split_by_bytes([100, 1, 1, 1], 2, "m") == [[0], [1, 2, 3]]
    assert split_by_bytes([1, 1, 1, 100], 2, "m") == [[0, 1, 2], [3]]
    assert split_by_bytes([1, 1, 1, 1], 4, "m") == [[0], [1], [2], [3]]
    assert split_by_bytes([5, 5, 5, 5, 5, 5], 3, "m") == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="fragments=3 but the model has 2 parameters"):
        split_by_bytes([4, 4], 3, "m")


def test_int8_layout():
    ops = NumpyOps()
    x = np.array([0.5, -1.27, 0.0, 0.01], F32)
    payload, seen = ops.quantize_int8(x)
    assert payload.dtype == np.int8 and payload.size == 4 + x.size
    scale = payload[:4].copy().view(F32)[0]
    assert scale == F32(1.27) / F32(127.0)
    np.testing.assert_array_equal(payload[4:], [50, -127, 0, 1])
    np.testing.assert_allclose(seen, _quantize(x))
    other, _ = ops.quantize_int8(np.array([1.0, 1.0, -2.0, 0.0], F32))
    mean = ops.dequantize_int8_mean(np.concatenate([payload, other]), 2, x)
    np.testing.assert_allclose(mean, (_quantize(x) + _quantize(np.array([1, 1, -2, 0], F32))) / 2,
                               rtol=1e-6)


def test_int8_bytes_match_torch():
    torch = pytest.importorskip("torch")
    from dadt.torch.training_modes.periodic import TorchOps
    x = np.random.default_rng(3).normal(size=37).astype(F32)
    mine, _ = NumpyOps().quantize_int8(x)
    theirs, _ = TorchOps(None).quantize_int8(torch.from_numpy(x))
    np.testing.assert_array_equal(mine, theirs.numpy())


def test_collectives():
    n, rank = basics.size(), basics.rank()
    ops = NumpyOps()
    x = np.full(5, rank + 1, F32)
    avg = ops.wait(ops.allreduce_average_async(x, "test_periodic_numpy.avg"))
    np.testing.assert_allclose(avg, np.full(5, (n + 1) / 2))
    gathered = ops.wait(ops.allgather_async(x, "test_periodic_numpy.gather"))
    np.testing.assert_array_equal(gathered, np.repeat(np.arange(1, n + 1, dtype=F32), 5))
    half = ops.cast(x, "fp16")
    assert half.dtype == np.float16 and ops.uncast(half, x).dtype == F32
    assert str(ops.cast(x, "bf16").dtype) == "bfloat16"


@pytest.mark.parametrize("mode,given,compression,message", [
    ("local_sgd", {}, "none", "needs sync_every"),
    ("local_sgd", {"sync_every": 2, "moving_rate": 0.5}, "none",
     "moving_rate is not an option of mode='local_sgd'"),
    ("easgd", {"sync_every": 2}, "fp16", "averages the weights themselves"),
    ("diloco", {"sync_every": 4, "fragments": 2, "fragment_sync_delay": 2}, "none",
     "fragment_sync_delay must be less than"),
    ("diloco", {"sync_every": 4, "outer_optimizer": {"lr": 1.0, "beta": 2}}, "none",
     "outer_optimizer as a dict takes"),
    ("diloco", {"sync_every": 4, "outer_optimizer": "sgd"}, "none",
     "outer_optimizer must be"),
    ("diloco", {"sync_every": 4}, "int4", "compression of mode='diloco' must be one of"),
    ("sync", {"sync_every": 4}, "none", "mode must be"),
])
def test_check_mode_errors(mode, given, compression, message):
    with pytest.raises(ValueError, match=message):
        check_mode(mode, given, compression, 2)


def test_check_mode_defaults():
    knobs = check_mode("easgd", {"sync_every": 4}, "none", 3)
    assert knobs["moving_rate"] == pytest.approx(0.3) and knobs["warmup_steps"] == 0
    assert periodic_numpy.wire_name(None) == "none"
