"""dadt.jax.DistributedOptimizer in the modes that send less (local_sgd, diloco, easgd), against the
NumPy reference of test_periodic_numpy.py; and dadt.keras's modes on Keras's jax backend:

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_frameworks/test_periodic_jax.py

The parameters are two arrays and the loss <w, x>, whose gradient is the data x (different on
every rank and step); the inner optimizer is optax.sgd. Each case runs eagerly and under
jax.jit, then flushes; a checkpoint taken with an exchange in flight resumes as if never stopped;
the digits MLP reaches >= 0.90 test accuracy in mode local_sgd.
"""
import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # the Keras test below: the jax backend

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

optax = pytest.importorskip("optax")

import dadt.jax as dadt  # noqa: E402
from periodic_reference import (digits_split, CASE_IDS, CASES, LR, SHAPES, gradient,  # noqa: E402
                                 reference_for, start_weights, tolerance)


@pytest.fixture(scope="module", autouse=True)
def dadt_session():
    if not dadt.is_initialized():
        dadt.init()
    yield


def _loss(params, xs):
    return jnp.sum(params["a"] * xs[0]) + jnp.sum(params["b"] * xs[1])


def _trainer(tx, compiled):
    def step(params, state, xs):
        updates, state = tx.update(jax.grad(_loss)(params, xs), state, params)
        return optax.apply_updates(params, updates), state
    return jax.jit(step) if compiled else step


def _leaves(params):
    return [np.asarray(params["a"]), np.asarray(params["b"])]


def _check_equal_everywhere(values, name="test_periodic_jax.equal"):
    flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in values])
    rows = np.asarray(dadt.allgather(jnp.asarray(flat[None, :]), name=name))
    for row in rows:
        np.testing.assert_array_equal(row, rows[0])


def _tx(kwargs, name):
    return dadt.DistributedOptimizer(optax.sgd(LR), name=name, **kwargs)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("case,kwargs,steps", CASES, ids=CASE_IDS)
def test_mode_matches_reference(case, kwargs, steps, compiled):
    n, rank = dadt.size(), dadt.rank()
    w0 = start_weights(SHAPES)
    params = {"a": jnp.asarray(w0[0]), "b": jnp.asarray(w0[1])}
    tx = _tx(kwargs, "jp.%s.%s" % (case, compiled))
    state = tx.init(params)
    step = _trainer(tx, compiled)
    ref = reference_for(kwargs, n, w0)
    for t in range(steps):
        params, state = step(params, state, [jnp.asarray(g) for g in gradient(rank, t, SHAPES)])
        ref.step([gradient(r, t, SHAPES) for r in range(n)])
    for g, want in zip(_leaves(params), ref.w[rank]):
        np.testing.assert_allclose(g, want, **tolerance(kwargs))
    params = tx.flush(params)
    ref.flush()
    _check_equal_everywhere(_leaves(params))
    for g, want in zip(_leaves(params), ref.w[rank]):
        np.testing.assert_allclose(g, want, **tolerance(kwargs))
    if n > 1:
        assert tx.bytes_sent > 0


def test_checkpoint_with_exchange_in_flight():
    """Streaming DiLoCo saved after step 5 (fragment 0's allreduce in flight: started at s = 5,
    lands at s = 6) and restored into a new transformation: the same parameters as an
    uninterrupted run."""
    case, kwargs, steps = CASES[CASE_IDS.index("diloco_streaming_int8")]
    n, rank = dadt.size(), dadt.rank()
    w0 = start_weights(SHAPES)
    params = {"a": jnp.asarray(w0[0]), "b": jnp.asarray(w0[1])}
    tx = _tx(kwargs, "jp.ckpt")
    state = tx.init(params)
    step = _trainer(tx, compiled=True)
    ref = reference_for(kwargs, n, w0)
    for t in range(steps):
        if t == 5:
            saved = tx.mode_state()
            tx = _tx(kwargs, "jp.ckpt")
            tx.init(params)  # (the optax state carries over as it is)
            tx.load_mode_state(saved)
            step = _trainer(tx, compiled=True)
        params, state = step(params, state, [jnp.asarray(g) for g in gradient(rank, t, SHAPES)])
        ref.step([gradient(r, t, SHAPES) for r in range(n)])
    params = tx.flush(params)
    ref.flush()
    for g, want in zip(_leaves(params), ref.w[rank]):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_update_needs_params_and_flush_is_eager():
    params = {"a": jnp.zeros(3)}
    tx = _tx(dict(mode="local_sgd", sync_every=2), "jp.errors")
    state = tx.init(params)
    with pytest.raises(ValueError, match="needs|exchanges the parameters"):
        tx.update(params, state)
    with pytest.raises(Exception, match="flush\\(\\) runs eagerly"):
        jax.jit(tx.flush)(params)
    with pytest.raises(ValueError, match="not of mode='sync'"):
        dadt.DistributedOptimizer(optax.sgd(0.1), sync_every=2)
    with pytest.raises(ValueError, match="averages the weights themselves"):
        dadt.DistributedOptimizer(optax.sgd(0.1), mode="easgd", sync_every=2,
                                  compression=dadt.Compression.bf16)


def test_keras_jax_backend_fit():
    """dadt.keras's mode easgd in model.fit on Keras's jax backend (a jitted train step: the
    exchange is an ordered io_callback); a Dense layer without bias and the loss mean(x w),
    batch size 1: step t's gradient is x_t."""
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "jax":
        pytest.skip("Keras was loaded with the %r backend" % keras.backend.backend())
    import dadt.keras as dk
    kwargs = dict(mode="easgd", sync_every=3, moving_rate=0.25, warmup_steps=1)
    n, rank, steps = dadt.size(), dadt.rank(), 8
    w0 = start_weights([(6, 1)], salt=5)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1, use_bias=False)])
    model.set_weights(w0)
    opt = dk.DistributedOptimizer(keras.optimizers.SGD(LR), name="jp.keras", **kwargs)
    model.compile(optimizer=opt, loss=lambda y, p: keras.ops.mean(p))
    xs = np.stack([gradient(rank, t, [(6,)], salt=5)[0] for t in range(steps)])
    model.fit(xs, np.zeros((steps, 1), np.float32), batch_size=1, epochs=1, shuffle=False,
              verbose=0, callbacks=[dk.callbacks.FlushCallback()])
    ref = reference_for(kwargs, n, w0)
    for t in range(steps):
        ref.step([[gradient(r, t, [(6,)], salt=5)[0].reshape(6, 1)] for r in range(n)])
    ref.flush()
    _check_equal_everywhere(model.get_weights(), "test_periodic_jax.keras_equal")
    np.testing.assert_allclose(model.get_weights()[0], ref.w[rank][0], rtol=1e-5, atol=1e-5)


def test_digits_local_sgd():
    """The digits MLP of examples/jax/train_digits.py in mode local_sgd: >= 0.90 test accuracy."""
    pytest.importorskip("sklearn.datasets")
    n, rank = dadt.size(), dadt.rank()
    x_train, x_test, y_train, y_test = digits_split()
    x_shard, y_shard = x_train[rank::n], y_train[rank::n]
    key = jax.random.PRNGKey(42)  # the same initial parameters on every rank
    params = []
    for fan_in, fan_out in [(64, 128), (128, 10)]:
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in),
                       "b": jnp.zeros(fan_out)})

    def forward(params, x):
        h = jax.nn.relu(x @ params[0]["w"] + params[0]["b"])
        return h @ params[1]["w"] + params[1]["b"]

    def loss_fn(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()

    tx = dadt.DistributedOptimizer(optax.sgd(0.05, momentum=0.9), mode="local_sgd",
                                   sync_every=8, name="jp.digits")
    state = tx.init(params)

    @jax.jit
    def step(params, state, x, y):
        updates, state = tx.update(jax.grad(loss_fn)(params, x, y), state, params)
        return optax.apply_updates(params, updates), state

    steps = (len(x_train) // n) // 32
    rng = np.random.default_rng(rank)
    for _ in range(10):
        perm = rng.permutation(len(x_shard))
        for s in range(steps):
            idx = perm[s * 32:(s + 1) * 32]
            params, state = step(params, state, x_shard[idx], y_shard[idx])
    params = tx.flush(params)
    _check_equal_everywhere([leaf for layer in params for leaf in (layer["w"], layer["b"])],
                            "test_periodic_jax.digits_equal")
    accuracy = float(jnp.mean(jnp.argmax(forward(params, x_test), axis=1) == y_test))
    assert accuracy >= 0.90
