"""How the async and dear training modes cut parameters into buckets (plan_buckets)."""
import torch

from dadt.torch.training_modes import plan_buckets


def _params(*sizes, dtype=torch.float32):
    return [torch.zeros(n, dtype=dtype) for n in sizes]


def _shape(buckets, params):
    index = {id(p): i for i, p in enumerate(params)}
    return [[index[id(p)] for p in bucket] for bucket in buckets]


def test_runs_close_once_they_hold_the_bucket_size():
    # 4-byte floats, 1 KiB buckets: 256 elements close a run
    params = _params(300, 10, 300, 10, 50, 10)
    assert _shape(plan_buckets(params, 1024), params) == [[0], [1, 2], [3, 4, 5]]


def test_large_parameters_alone_and_the_small_ones_between_them_together():
    # Each weight of 1 KiB or more is a bucket of its own; the biases and the small last weight
    # form one run, placed where its first parameter is.
    params = _params(300, 10, 300, 10, 50, 10)
    assert _shape(plan_buckets(params, 1024, large_alone=True), params) == [[0], [1, 3, 4, 5], [2]]


def test_a_run_of_small_parameters_still_closes_at_the_bucket_size():
    params = _params(100, 300, 100, 100, 100)
    assert _shape(plan_buckets(params, 1024, large_alone=True), params) == [[0, 2, 3], [1], [4]]


def test_a_dtype_change_closes_a_run():
    params = _params(10, 10) + _params(10, dtype=torch.float64) + _params(10)
    assert _shape(plan_buckets(params, 1024), params) == [[0, 1], [2], [3]]
    assert _shape(plan_buckets(params, 1024, large_alone=True), params) == [[0, 1], [2], [3]]


def test_bucket_size_zero_gives_every_parameter_its_own_bucket():
    params = _params(3, 1, 2)
    for large_alone in (False, True):
        assert _shape(plan_buckets(params, 0, large_alone), params) == [[0], [1], [2]]
