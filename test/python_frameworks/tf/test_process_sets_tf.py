"""Process sets in dadt.tensorflow and dadt.keras: an allreduce (eager and in tf.function), the
gradient of a reducescatter, DistributedGradientTape and the Keras DistributedOptimizer, each on
the even and the odd ranks as two sets at once; the set geometry ops; an unknown set in a graph;
a rank outside the set of a gradient reduction (it keeps its gradients, as in Horovod)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import dadt.keras as dkeras
import dadt.tensorflow as dadt


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_allreduce_on_a_set(world, nm, halves, compiled):
    def fn():
        return dadt.allreduce(tf.fill([3], float(world.rank)), name=nm("x"), op=dadt.Sum,
                              process_set=halves)
    out = (tf.function(fn) if compiled else fn)()
    np.testing.assert_array_equal(out.numpy(), np.full(3, float(sum(halves.ranks))))


def test_gradients_on_a_set(world, nm, halves):
    n = halves.size()
    x = tf.ones([2 * n, 2])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dadt.reducescatter(x, name=nm("rs"), op=dadt.Sum, process_set=halves)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.full((2 * n, 2), float(n)))
    w = tf.Variable([0.0])
    with tf.GradientTape() as tape:
        loss = w * float(world.rank)
    grad = dadt.DistributedGradientTape(tape, process_set=halves).gradient(loss, [w])[0]
    np.testing.assert_allclose(grad.numpy(), [np.mean(halves.ranks)])


def test_keras_optimizer_averages_within_the_set(world, halves):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer=keras.initializers.Constant(0.0))])
    opt = dkeras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.5), process_set=halves)
    model.compile(optimizer=opt, loss="mse")
    model.fit(np.ones((1, 1), np.float32), np.full((1, 1), world.rank, np.float32), batch_size=1,
              epochs=1, verbose=0)
    w = float(model.layers[0].kernel.numpy().reshape(()))
    assert abs(w - np.mean(halves.ranks)) < 1e-6, w


def test_set_geometry_ops(world, halves):
    # Horovod's size_op(process_set_id) and process_set_included_op: read when the op runs; an id
    # that no set has gives -3 (HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET).
    from dadt.common.basics import _core
    other = next(i for i in _core.process_set_ids() if world.rank not in _core.process_set_ranks(i))
    unknown = 1000

    def ops():
        return [dadt.size_op(halves.process_set_id), dadt.process_set_included_op(halves.process_set_id),
                dadt.process_set_included_op(other), dadt.process_set_included_op(),
                dadt.size_op(unknown), dadt.process_set_included_op(unknown)]
    want = [halves.size(), 1, 0, 1, -3, -3]
    assert [int(t) for t in ops()] == want
    with tf.Graph().as_default() as graph:
        in_graph = ops()
    with tf.compat.v1.Session(graph=graph) as session:
        assert [int(v) for v in session.run(in_graph)] == want
    assert all(t.dtype == tf.int32 for t in in_graph)


@pytest.mark.parametrize("mode", ["tf.function", "session"])
def test_unknown_set_in_a_graph_is_a_value_error_when_built(nm, mode):
    # As Horovod's ops: ValueError while the graph is built, not an InvalidArgumentError at run.
    stale = dadt.ProcessSet([0])
    stale.process_set_id = 1000  # an id the runtime never gave
    build = lambda: dadt.allreduce(tf.ones([2]), name=nm("x"), process_set=stale)  # noqa: E731
    with pytest.raises(ValueError, match="process set 1000 is not registered"):
        if mode == "tf.function":
            tf.function(build)()
        else:
            with tf.Graph().as_default():
                build()


@pytest.fixture
def all_but_last(fw, world):
    """A process set of every rank but the last (rank 0 alone at 2 ranks)."""
    if world.size < 2:
        pytest.skip("a rank outside the set needs 2 ranks")
    ps = dadt.add_process_set(list(range(world.size - 1)))
    yield ps
    dadt.remove_process_set(ps)


def test_rank_outside_the_set_keeps_its_gradients(world, all_but_last):
    # Horovod's rule: a rank outside the set passes its gradients through unchanged; the members
    # average theirs (DistributedGradientTape, and both DistributedOptimizers).
    members = all_but_last.ranks
    outside = world.rank not in members
    want = float(world.rank) if outside else float(np.mean(members))
    w = tf.Variable([1.0])
    with tf.GradientTape() as tape:
        loss = w * float(world.rank)
    grad = dadt.DistributedGradientTape(tape, process_set=all_but_last).gradient(loss, [w])[0]
    np.testing.assert_allclose(grad.numpy(), [want])

    opt = dkeras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0), process_set=all_but_last)
    v = keras.Variable([1.0])
    opt.apply([tf.constant([float(world.rank)])], [v])
    np.testing.assert_allclose(v.numpy(), [1.0 - want])

    with tf.Graph().as_default() as graph:
        u = tf.compat.v1.Variable([1.0])
        legacy = dadt.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                           process_set=all_but_last)
        train = legacy.minimize(tf.reduce_sum(u) * float(world.rank))
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(train)
        np.testing.assert_allclose(session.run(u), [1.0 - want])
