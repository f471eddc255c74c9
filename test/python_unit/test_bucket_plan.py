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


def test_dear_cuts_a_small_model_into_buckets_across_hosts_only():
    from dadt.torch.training_modes.buckets import dear_bucket_bytes
    MiB = 1024 * 1024
    # 1.6 MB of gradients under a 4 MiB threshold: one bucket on one host (no chain to hide,
    # fewer collectives), a quarter of the model across hosts.
    assert dear_bucket_bytes(4 * MiB, 1_600_000, spans_hosts=False) == 4 * MiB
    assert dear_bucket_bytes(4 * MiB, 1_600_000, spans_hosts=True) == 400_000
    # A large model keeps the configured size; a tiny one stops at the 256 KiB floor, and never
    # above the configured size; 0 (one parameter per bucket) stays 0.
    assert dear_bucket_bytes(4 * MiB, 30 * MiB, spans_hosts=True) == 4 * MiB
    assert dear_bucket_bytes(4 * MiB, 100_000, spans_hosts=True) == 256 * 1024
    assert dear_bucket_bytes(100_000, 100_000, spans_hosts=True) == 100_000
    assert dear_bucket_bytes(0, 30 * MiB, spans_hosts=True) == 0


def test_dear_default_bucket_size_follows_the_job_not_the_rank(monkeypatch):
    from dadt.torch.training_modes import dear
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    params = list(model.parameters())
    nbytes = sum(p.numel() * 4 for p in params)  # 1.58 MB
    monkeypatch.setenv("DADT_FUSION_THRESHOLD", str(4 * 1024 * 1024))
    monkeypatch.setattr(dear, "size", lambda: 3)
    monkeypatch.delenv("DADT_ELASTIC", raising=False)
    # 2 ranks on one host and 1 on another: every rank, whatever its local size, cuts finer.
    for local in (1, 2):
        monkeypatch.setattr(dear, "local_size", lambda: local)
        assert dear.DearEngine.planned_bucket_bytes(params) == nbytes // 4
    monkeypatch.setattr(dear, "local_size", lambda: 3)  # one host
    assert dear.DearEngine.planned_bucket_bytes(params) == 4 * 1024 * 1024
    monkeypatch.setattr(dear, "local_size", lambda: 1)
    monkeypatch.setenv("DADT_ELASTIC", "1")  # hosts may change under the buckets
    assert dear.DearEngine.planned_bucket_bytes(params) == 4 * 1024 * 1024
