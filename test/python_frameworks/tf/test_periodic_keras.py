"""dadt.keras.DistributedOptimizer in the modes that send less (local_sgd, diloco, easgd), against
the NumPy reference of test_periodic_numpy.py, on Keras's tensorflow backend:

    dadtrun --gloo -np N python -m pytest -q -p no:cacheprovider test/python_frameworks/test_periodic_keras.py

The model is two variables and the loss <w, x>, whose gradient is the data x (different on every
rank and step); the inner optimizer is SGD. Each case runs eagerly and in a tf.function, then
flushes; model.fit runs with FlushCallback; a checkpoint taken with an exchange in flight resumes
as if never stopped; the digits MLP reaches >= 0.90 test accuracy in mode diloco.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import dadt.keras as dadt  # noqa: E402
from periodic_reference import (digits_split, CASE_IDS, CASES, LR, SHAPES, gradient,  # noqa: E402
                                 reference_for, start_weights, tolerance)

pytestmark = pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                                reason="this suite runs Keras's tensorflow backend")


@pytest.fixture(scope="module", autouse=True)
def dadt_session():
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(2)
    except RuntimeError:  # TensorFlow already started (another module of this session)
        pass
    if not dadt.is_initialized():
        dadt.init()
    yield


def _optimizer(kwargs, name):
    kw = dict(kwargs)
    compression = kw.pop("compression", None)
    return dadt.DistributedOptimizer(keras.optimizers.SGD(LR), name=name,
                                     compression=compression, **kw)


def _trainer(variables, opt, compiled):
    def step(xs):
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v.value * x) for v, x in zip(variables, xs)])
        opt.apply(tape.gradient(loss, [v.value for v in variables]), variables)
    return tf.function(step) if compiled else step


def _check_equal_everywhere(values):
    flat = np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in values])
    rows = np.asarray(dadt.allgather(flat[None, :], name="test_periodic_keras.equal"))
    for row in rows:
        np.testing.assert_array_equal(row, rows[0])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("case,kwargs,steps", CASES, ids=CASE_IDS)
def test_mode_matches_reference(case, kwargs, steps, compiled):
    n, rank = dadt.size(), dadt.rank()
    w0 = start_weights(SHAPES)
    variables = [keras.Variable(w) for w in w0]
    opt = _optimizer(kwargs, "kp.%s.%s" % (case, compiled))
    step = _trainer(variables, opt, compiled)
    ref = reference_for(kwargs, n, w0)
    for t in range(steps):
        step([tf.constant(g) for g in gradient(rank, t, SHAPES)])
        ref.step([gradient(r, t, SHAPES) for r in range(n)])
    got = [np.array(v.numpy()) for v in variables]
    want_before = [np.array(w) for w in ref.w[rank]]
    opt.flush()
    ref.flush()
    flushed = [np.array(v.numpy()) for v in variables]
    _check_equal_everywhere(flushed)
    for g, want in zip(got, want_before):
        np.testing.assert_allclose(g, want, **tolerance(kwargs))
    for g, want in zip(flushed, ref.w[rank]):
        np.testing.assert_allclose(g, want, **tolerance(kwargs))
    if n > 1:
        assert opt.bytes_sent > 0


def _compiled_case(case_id, name):
    """A CASES entry ready to train under tf.function: (kwargs, steps, size, rank, variables,
    optimizer, step function, its NumPy reference)."""
    _, kwargs, steps = CASES[CASE_IDS.index(case_id)]
    w0 = start_weights(SHAPES)
    variables = [keras.Variable(w) for w in w0]
    opt = _optimizer(kwargs, name)
    n = dadt.size()
    return (kwargs, steps, n, dadt.rank(), variables, opt,
            _trainer(variables, opt, compiled=True), reference_for(kwargs, n, w0))


def test_checkpoint_with_exchange_in_flight():
    """Streaming DiLoCo saved after step 5 (fragment 0's allreduce in flight: started at s = 5,
    lands at s = 6) and restored into a new optimizer: the same weights as an uninterrupted run."""
    kwargs, steps, n, rank, variables, opt, step, ref = _compiled_case(
        "diloco_streaming_int8", "kp.ckpt")
    for t in range(steps):
        if t == 5:
            store = {}
            opt.save_own_variables(store)
            assert "dadt_periodic" in store
            saved = [v.numpy() for v in variables]
            variables = [keras.Variable(w) for w in saved]
            opt = _optimizer(kwargs, "kp.ckpt")
            opt.build(variables)
            opt.load_own_variables(store)
            step = _trainer(variables, opt, compiled=True)
        step([tf.constant(g) for g in gradient(rank, t, SHAPES)])
        ref.step([gradient(r, t, SHAPES) for r in range(n)])
    opt.flush()
    ref.flush()
    for g, want in zip([v.numpy() for v in variables], ref.w[rank]):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_elastic_restore_rolls_the_exchange_state_back_with_the_model():
    """KerasState's handler of the mode's exchange state (dadt.keras.elastic.PeriodicHandler):
    streaming local SGD committed after step 5 (fragment 0's exchange in flight: the commit keeps
    its average), trained on to step 8, then restored as after a peer's death (the variables and
    the exchange state from the commit) and trained to the end: the weights of a run that never
    failed. Without the handler the schedule would stay at step 8 with the weights of step 5."""
    from dadt.keras.elastic import PeriodicHandler
    kwargs, steps, n, rank, variables, opt, step, ref = _compiled_case(
        "local_sgd_streaming_int8", "kp.elastic")
    handler = PeriodicHandler(lambda: opt._dadt_periodic)
    assert handler.saved is None  # before the first step: nothing to keep
    for t in range(5):
        step([tf.constant(g) for g in gradient(rank, t, SHAPES)])
        ref.step([gradient(r, t, SHAPES) for r in range(n)])
    handler.save()
    committed = [v.numpy() for v in variables]
    for t in range(5, 8):  # the steps a failure loses (nothing in flight after step 8)
        step([tf.constant(g) for g in gradient(rank, t, SHAPES)])
    for v, w in zip(variables, committed):
        v.assign(w)
    handler.restore()
    for t in range(5, steps):
        step([tf.constant(g) for g in gradient(rank, t, SHAPES)])
        ref.step([gradient(r, t, SHAPES) for r in range(n)])
    opt.flush()
    ref.flush()
    for g, want in zip([v.numpy() for v in variables], ref.w[rank]):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_fit_with_flush_callback():
    """model.fit (its compiled train step) in mode easgd: a Dense layer without bias and the loss
    mean(x w), batch size 1: step t's gradient is x_t."""
    kwargs = dict(mode="easgd", sync_every=3, moving_rate=0.25, warmup_steps=1)
    n, rank, steps = dadt.size(), dadt.rank(), 8
    w0 = start_weights([(6, 1)], salt=5)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(1, use_bias=False)])
    model.set_weights(w0)
    model.compile(optimizer=_optimizer(kwargs, "kp.fit"), loss=lambda y, p: keras.ops.mean(p))
    xs = np.stack([gradient(rank, t, [(6,)], salt=5)[0] for t in range(steps)])
    model.fit(xs, np.zeros((steps, 1), np.float32), batch_size=1, epochs=1, shuffle=False,
              verbose=0, callbacks=[dadt.callbacks.FlushCallback()])
    ref = reference_for(kwargs, n, w0)
    for t in range(steps):
        ref.step([[gradient(r, t, [(6,)], salt=5)[0].reshape(6, 1)] for r in range(n)])
    ref.flush()
    _check_equal_everywhere(model.get_weights())
    np.testing.assert_allclose(model.get_weights()[0], ref.w[rank][0], rtol=1e-5, atol=1e-5)


def test_options_refused():
    opt = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="needs sync_every"):
        dadt.DistributedOptimizer(opt, mode="local_sgd")
    with pytest.raises(ValueError, match="not of mode='sync'"):
        dadt.DistributedOptimizer(opt, sync_every=4)
    with pytest.raises(ValueError, match="backward_passes_per_step must be 1"):
        dadt.DistributedOptimizer(opt, mode="diloco", sync_every=4, backward_passes_per_step=2)
    from dadt.tensorflow import Compression
    with pytest.raises(ValueError, match="averages the weights themselves"):
        dadt.DistributedOptimizer(opt, mode="easgd", sync_every=4,
                                  compression=Compression.fp16)
    with pytest.raises(ValueError, match="Compression.int8 is for mode='diloco' and mode='local_sgd'"):
        dadt.DistributedOptimizer(opt, compression=Compression.int8)
    with pytest.raises(ValueError, match="mode must be one of"):
        dadt.DistributedOptimizer(opt, mode="gossip", sync_every=4)


def test_digits_diloco():
    """The digits MLP of examples/keras/train_digits.py in mode diloco: >= 0.90 test accuracy."""
    pytest.importorskip("sklearn.datasets")
    n, rank = dadt.size(), dadt.rank()
    x_train, x_test, y_train, y_test = digits_split()
    rows = len(x_train) // n
    keras.utils.set_random_seed(42)  # the same initial weights on every rank
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    opt = dadt.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9), mode="diloco",
                                    sync_every=8, name="kp.digits")
    model.compile(optimizer=opt, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_train[rank::n][:rows], y_train[rank::n][:rows], batch_size=32, epochs=10,
              verbose=0, callbacks=[dadt.callbacks.FlushCallback()])
    _check_equal_everywhere(model.get_weights())
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy >= 0.90
