"""Compression.powersgd in one process: its settings, which gradients it compresses, its update
rule against a reference written here in NumPy from the equations of docs/training-modes.md
(PowerSGD), and the order in which the sync engine starts the P and Q allreduces.

The runtime runs as rank 0 of 1 (no launcher), so an allreduce returns its input: the rule is the
one-rank rule here; test/python_multirank/test_powersgd.py averages over 2-4 ranks.
"""
import zlib

import numpy as np
import pytest
import torch

import dadt.torch as dadt
from dadt.torch.compression import PowerSGD
from dadt.torch.training_modes import ENGINES, EngineHost
from dadt.torch.training_modes import powersgd as psgd


@pytest.fixture(scope="module")
def runtime():
    dadt.init()
    yield
    dadt.shutdown()


# -- settings -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,message", [
    (dict(rank=0), "rank must be an int >= 1, got 0"),
    (dict(rank=-2), "rank must be an int >= 1"),
    (dict(rank=1.5), "rank must be an int >= 1, got 1.5"),
    (dict(rank=True), "rank must be an int >= 1, got True"),
    (dict(start_iter=-1), "start_iter must be an int >= 0"),
    (dict(seed=-1), "seed must be an int >= 0"),
    (dict(min_compression_rate=-1), "min_compression_rate must be a finite number >= 0"),
    (dict(min_compression_rate=float("nan")), "min_compression_rate must be a finite number"),
    (dict(min_compression_rate="2"), "min_compression_rate must be a finite number"),
    (dict(error_feedback=1), "error_feedback must be True or False, got 1"),
    (dict(warm_start=None), "warm_start must be True or False, got None"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dadt.Compression.powersgd(**kwargs)


def test_defaults_are_torchs():
    s = dadt.Compression.powersgd()
    assert (s.rank, s.start_iter, s.min_compression_rate, s.error_feedback, s.warm_start, s.seed) \
        == (1, 1000, 2.0, True, True, 0)
    assert "rank=1" in repr(s)


def test_the_compressed_gradients_are_torchs():
    """A gradient is compressed where torch's powerSGD_hook compresses it: two dimensions or more,
    viewed as shape[0] x the rest, with n m > rate * r (n + m), r = min(rank, n, m)."""
    hook = pytest.importorskip("torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook")
    if not hasattr(hook, "_should_compress"):
        pytest.skip("this torch has no powerSGD_hook._should_compress")
    sizes = (1, 2, 3, 4, 5, 8, 16, 33, 100)
    for rank in (1, 2, 4):
        for rate in (0.0, 1.0, 2.0, 3.5):
            s = dadt.Compression.powersgd(rank=rank, min_compression_rate=rate)
            for n in sizes:
                for m in sizes:
                    r = min(n, m, rank)
                    theirs = hook._should_compress(n, m, r, rate)[0]
                    assert (s.matrix((n, m)) is not None) == theirs, (n, m, rank, rate)
                    if theirs:
                        assert s.matrix((n, m)) == (n, m, r)
    s = dadt.Compression.powersgd(rank=2)
    assert s.matrix((16,)) is None and s.matrix(()) is None  # vectors and scalars: never
    assert s.matrix((8, 3, 3, 3)) == (8, 27, 2)               # a conv weight: out x in*kh*kw


def test_orthogonalize_gives_orthonormal_columns_of_the_same_span():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(20, 3, generator=gen, dtype=torch.float64)
    q = psgd.orthogonalize_(a.clone())
    assert torch.allclose(q.t() @ q, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(q @ (q.t() @ a), a, atol=1e-12)  # a lies in span(q)
    z = torch.zeros(5, 2)
    z[:, 1] = 1.0
    out = psgd.orthogonalize_(z)
    assert torch.isfinite(out).all() and torch.equal(out[:, 0], torch.zeros(5))


# -- the update rule ------------------------------------------------------------------------------
class _Host:
    """What the reducer asks of the optimizer: names, the process set, the reduction."""

    def __init__(self, names, ranks=1, op=dadt.Average):
        self._names = names
        self._ranks = ranks
        self.op = op

    process_set = None

    def name_of(self, p):
        return self._names[p]

    def reduction(self):
        return self.op, 1.0, 1.0

    def reducing_ranks(self):
        return self._ranks


def _q0(seed, name, m, r, dtype):
    """Q0 as documented: randn(m, r) of a CPU generator seeded with seed * 2^32 + crc32(name), in
    the dtype of the computation (float64 for float64 gradients, else float32)."""
    gen = torch.Generator().manual_seed((seed * 2 ** 32 + zlib.crc32(name.encode())) % 2 ** 63)
    return gen, torch.randn(m, r, generator=gen, dtype=dtype).double().numpy()


def _reference(grads, name, r, start_iter, error_feedback, warm_start, seed,
               q_dtype=torch.float64):
    """PowerSGD on one rank, in NumPy: M = G + E; P = orth(M Q) (QR); Q = M^T P; out = P Q^T;
    E = M - out; Q kept (warm start) or drawn anew; the first start_iter gradients as they are."""
    n, m = grads[0].shape
    err = np.zeros((n, m))
    gen, q = None, None
    out = []
    for t, g in enumerate(grads):
        if t < start_iter:
            out.append(g)
            continue
        mat = g + err if error_feedback else g
        if q is None:
            gen, q = _q0(seed, name, m, r, q_dtype)
        elif not warm_start:
            q = torch.randn(m, r, generator=gen, dtype=q_dtype).double().numpy()
        p, _ = np.linalg.qr(mat @ q)
        q = mat.T @ p
        approx = p @ q.T
        if error_feedback:
            err = mat - approx
        out.append(approx)
    return out


def _run(reducer, p, grads):
    """Each gradient through the reducer: PowerSGD's result, or the gradient itself where it
    goes uncompressed (the one-rank average)."""
    out = []
    for g in grads:
        finish = reducer.submit(p, g.clone())
        out.append(g.clone() if finish is None else finish())
    return out


def _grads(shape, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen, dtype=torch.float64) for _ in range(steps)]


@pytest.mark.parametrize("rank,error_feedback,warm_start", [
    (1, True, True), (2, True, True), (3, True, False), (2, False, True), (1, False, False)])
def test_update_rule_matches_the_reference(runtime, rank, error_feedback, warm_start):
    p = torch.nn.Parameter(torch.zeros(24, 4, 5, dtype=torch.float64))  # 24 x 20
    settings = dadt.Compression.powersgd(rank=rank, start_iter=2, error_feedback=error_feedback,
                                         warm_start=warm_start, seed=7)
    reducer = psgd.PowerSGDReducer(settings, _Host({p: "layer.weight"}), [p])
    grads = _grads(p.shape, 8)
    got = _run(reducer, p, grads)
    want = _reference([g.reshape(24, 20).numpy() for g in grads], "layer.weight", rank, 2,
                      error_feedback, warm_start, 7)
    for t, (a, b) in enumerate(zip(got, want)):
        assert a.shape == p.shape and a.dtype == torch.float64
        np.testing.assert_allclose(a.reshape(24, 20).numpy(), b, rtol=1e-9, atol=1e-10,
                                   err_msg="step %d" % t)
    # Compressed: rank r is all that is left of a full-rank gradient.
    assert torch.linalg.matrix_rank(got[-1].reshape(24, 20)) == rank


def test_a_fixed_gradient_converges_to_its_best_rank_r_approximation(runtime):
    """Warm start makes PowerSGD one step of subspace iteration per step: on the same matrix it
    converges to the truncated SVD (the way torch tests its hook)."""
    gen = torch.Generator().manual_seed(3)
    u, _ = torch.linalg.qr(torch.randn(30, 6, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(20, 6, generator=gen, dtype=torch.float64))
    s = torch.tensor([10.0, 6.0, 1.0, 0.5, 0.2, 0.1], dtype=torch.float64)
    g = u @ torch.diag(s) @ v.t()
    p = torch.nn.Parameter(torch.zeros(30, 20, dtype=torch.float64))
    reducer = psgd.PowerSGDReducer(
        dadt.Compression.powersgd(rank=2, start_iter=0, error_feedback=False), _Host({p: "w"}), [p])
    out = _run(reducer, p, [g] * 40)
    best = u[:, :2] @ torch.diag(s[:2]) @ v[:, :2].t()
    assert torch.allclose(out[-1], best, atol=1e-9)
    assert not torch.allclose(out[0], best, atol=1e-3)  # one step is not enough


def test_error_feedback_delays_and_never_loses(runtime):
    """With error feedback what rank r leaves out is added to the next gradient: after the
    gradients stop, the residual drains (each step removes r more of its directions), and the sum
    of what was applied equals the sum of the gradients."""
    p = torch.nn.Parameter(torch.zeros(6, 9, dtype=torch.float64))
    reducer = psgd.PowerSGDReducer(dadt.Compression.powersgd(rank=1, start_iter=0),
                                   _Host({p: "w"}), [p])
    grads = _grads(p.shape, 5, seed=11)
    zeros = [torch.zeros(6, 9, dtype=torch.float64)] * 8
    out = _run(reducer, p, grads + zeros)
    assert torch.allclose(sum(out), sum(grads), atol=1e-9)
    assert not torch.allclose(sum(out[:5]), sum(grads), atol=1e-3)  # delayed, really


def test_sum_scales_by_the_ranks(runtime):
    p = torch.nn.Parameter(torch.zeros(8, 8, dtype=torch.float64))
    settings = dadt.Compression.powersgd(rank=1, start_iter=0)
    grads = _grads(p.shape, 3, seed=5)
    avg = _run(psgd.PowerSGDReducer(settings, _Host({p: "w"}), [p]), p, grads)
    # op=Sum over 3 ranks holding the same gradient: 3x the average's approximation
    summed = _run(psgd.PowerSGDReducer(settings, _Host({p: "w"}, ranks=3, op=dadt.Sum), [p]),
                  p, grads)
    for a, b in zip(avg, summed):
        assert torch.allclose(3 * a, b, rtol=1e-12)


def test_half_precision_gradients_are_compressed_in_float32(runtime):
    p = torch.nn.Parameter(torch.zeros(16, 8, dtype=torch.bfloat16))
    reducer = psgd.PowerSGDReducer(dadt.Compression.powersgd(rank=2, start_iter=0),
                                   _Host({p: "w"}), [p])
    g = _grads((16, 8), 1)[0]
    out = _run(reducer, p, [g.to(torch.bfloat16)])[0]
    want = _reference([g.to(torch.bfloat16).double().numpy()], "w", 2, 0, True, True, 0,
                      q_dtype=torch.float32)[0]
    assert out.dtype == torch.bfloat16
    np.testing.assert_allclose(out.double().numpy(), want, atol=0.05)


# -- DistributedOptimizer: where PowerSGD is refused ----------------------------------------------
def _model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))


@pytest.mark.parametrize("mode", ["local_sgd", "diloco", "easgd"])
def test_the_modes_that_send_the_model_refuse_it(runtime, mode):
    model = _model()
    with pytest.raises(ValueError, match="Compression.powersgd compresses gradients; mode=%r "
                                         "sends the model" % mode):
        dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), mode=mode,
                                  sync_every=4, compression=dadt.Compression.powersgd(rank=2))


@pytest.mark.parametrize("mode", ["async", "dear"])
def test_the_bucket_modes_refuse_it(runtime, mode):
    model = _model()
    with pytest.raises(ValueError, match="works with mode='sync' only: mode=%r" % mode):
        dadt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  named_parameters=model.named_parameters(), mode=mode,
                                  model=model, compression=dadt.Compression.powersgd(rank=2))


def test_misuse_is_refused(runtime):
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="must be called with its settings"):
        dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(),
                                  compression=dadt.Compression.powersgd)
    with pytest.raises(ValueError, match="groups= .* Compression.powersgd"):
        dadt.DistributedOptimizer(sgd, named_parameters=model.named_parameters(), groups=2,
                                  compression=dadt.Compression.powersgd(rank=2))
    with pytest.raises(ValueError, match="a plain collective cannot take it"):
        dadt.allreduce(torch.ones(4, 4), name="psgd.plain",
                       compression=dadt.Compression.powersgd(rank=1))
    cplx = torch.nn.Module()
    cplx.weight = torch.nn.Parameter(torch.zeros(16, 8, dtype=torch.complex64))
    with pytest.raises(ValueError, match="real floating-point gradients; parameter 'weight' is "
                                         "torch.complex64"):
        dadt.DistributedOptimizer(torch.optim.SGD(cplx.parameters(), lr=0.1),
                                  named_parameters=cplx.named_parameters(),
                                  compression=dadt.Compression.powersgd(rank=1))


# -- the pipeline ---------------------------------------------------------------------------------
class _Link:
    """A FIFO link standing in for the runtime: allreduce returns its input (ranks that hold the
    same values), and a collective completes once `lag` later collectives have been submitted
    (the wire is busy with it until then), or when it is waited for. Records submits and waits."""

    def __init__(self, lag):
        self.lag = lag
        self.names = []
        self.waited = set()
        self.events = []

    def allreduce_async_(self, tensor, name, process_set):
        self.names.append(name)
        self.events.append("submit " + name)
        return len(self.names) - 1

    def poll(self, handle):
        return handle in self.waited or len(self.names) - 1 - handle >= self.lag

    def synchronize(self, handle):
        self.events.append("wait " + self.names[handle])
        self.waited.add(handle)


class _EngineHost(_Host):
    """The sync engine's view of a DistributedOptimizer over a plain SGD, as if 2 ranks."""

    def __init__(self, model, settings):
        super().__init__({p: n for n, p in model.named_parameters()}, ranks=2)
        self._sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        self.param_groups = self._sgd.param_groups
        self.compression = settings

    backward_passes_per_step = 1
    sparse_as_dense = False

    def base_step(self, *args):
        return self._sgd.step(*args)

    def step_is_separable(self):
        return False


def _pipeline_events(monkeypatch, lag):
    """The collectives of one step of a 4-layer MLP without biases (backward: layer 6 first)."""
    link = _Link(lag)
    for name in ("allreduce_async_", "poll", "synchronize"):
        monkeypatch.setattr(psgd.RuntimeComm, name, getattr(link, name))
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(16, 16, bias=False), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers[:-1])
    host = _EngineHost(model, dadt.Compression.powersgd(rank=1, start_iter=0))
    params = [p for g in host.param_groups for p in g["params"]]
    engine = ENGINES["sync"].create(host, params, model=model, bucket_bytes=None, groups=None)
    model(torch.randn(4, 16)).sum().backward()
    in_backward = len(link.events)
    engine.step(None, True)
    engine.remove_hooks()
    return link.events, in_backward


def test_q_of_a_layer_starts_in_backward_once_its_p_is_in(runtime, monkeypatch):
    """A link that finishes each collective as the next one is submitted: the Q of the last
    layer is submitted from a later layer's gradient hook, before backward has submitted the
    P of the first layer."""
    events, in_backward = _pipeline_events(monkeypatch, lag=1)
    submits = [e for e in events[:in_backward] if e.startswith("submit")]
    assert submits[:4] == ["submit powersgd.P.6.weight", "submit powersgd.P.4.weight",
                           "submit powersgd.Q.6.weight", "submit powersgd.Q.4.weight"]
    assert submits.index("submit powersgd.Q.6.weight") < submits.index("submit powersgd.P.0.weight")


def test_step_starts_each_q_as_its_p_arrives(runtime, monkeypatch):
    """A link slower than backward (nothing finishes by itself): step() waits for the P's in the
    order backward submitted them and submits each Q at once, while the later P's are still in
    flight; it waits for a Q only when every Q is on the wire. Not all P's, then all Q's."""
    events, in_backward = _pipeline_events(monkeypatch, lag=10 ** 9)
    layers = ["6", "4", "2", "0"]
    assert events[:in_backward] == ["submit powersgd.P.%s.weight" % x for x in layers]
    expected = []
    for x in layers:
        expected += ["wait powersgd.P.%s.weight" % x, "submit powersgd.Q.%s.weight" % x]
    expected += ["wait powersgd.Q.%s.weight" % x for x in layers]
    assert events[in_backward:] == expected


def test_engine_host_offers_the_compression():
    assert "compression" in {n for n in dir(EngineHost) if not n.startswith("_")}
    assert isinstance(dadt.Compression.powersgd(rank=3), PowerSGD)
