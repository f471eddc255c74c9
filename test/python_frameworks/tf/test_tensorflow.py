"""dadt.tensorflow beyond the shared suite: gradients of every collective (eager and in tf.function),
tf.Variable inputs, DistributedGradientTape, broadcast_variables, objects, compression."""
import numpy as np
import pytest
import tensorflow as tf

import dadt.tensorflow as dadt


def _mean_weight(n):
    return sum(range(1, n + 1)) / n


def _grad(fn, x, world, compiled):
    """d/dx of sum(fn(x) * (rank + 1))."""
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(y * tf.cast(world.rank + 1, y.dtype))
        return tape.gradient(loss, x)
    return (tf.function(run) if compiled else run)(x)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_allreduce_gradient(world, nm, compiled):
    x = tf.ones([3])
    g_sum = _grad(lambda t: dadt.allreduce(t, name=nm("sum"), op=dadt.Sum), x, world, compiled)
    g_avg = _grad(lambda t: dadt.allreduce(t, name=nm("avg")), x, world, compiled)
    np.testing.assert_array_equal(g_sum.numpy(), np.full(3, sum(range(1, world.size + 1)), np.float32))
    np.testing.assert_allclose(g_avg.numpy(), np.full(3, _mean_weight(world.size), np.float32), rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_grouped_allreduce_gradient(world, nm, compiled):
    def fn(t):
        a, b = dadt.grouped_allreduce([t, 2 * t], name=nm(), op=dadt.Sum)
        return a + b
    g = _grad(fn, tf.ones([2]), world, compiled)
    np.testing.assert_array_equal(g.numpy(), np.full(2, 3 * sum(range(1, world.size + 1)), np.float32))


def test_allgather_gradient(world, nm):
    x = tf.ones([world.rank + 1, 2])  # ragged: the gradient must be this rank's rows
    g = _grad(lambda t: dadt.allgather(t, name=nm()), x, world, compiled=False)
    assert g.shape == x.shape
    np.testing.assert_allclose(g.numpy(), np.full(x.shape, _mean_weight(world.size), np.float32), rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_broadcast_gradient(world, nm, compiled):
    g = _grad(lambda t: dadt.broadcast(t, 0, name=nm()), tf.ones([4]), world, compiled)
    want = _mean_weight(world.size) if world.rank == 0 else 0.0
    np.testing.assert_allclose(g.numpy(), np.full(4, want, np.float32), rtol=1e-6)


def test_reducescatter_gradient(world, nm):
    n = world.size
    g = _grad(lambda t: dadt.reducescatter(t, name=nm(), op=dadt.Sum), tf.ones([2 * n, 1]), world, False)
    owner = np.repeat(np.arange(n), 2).reshape(-1, 1)  # rows 2i, 2i+1 go to rank i
    # Horovod's gradient for Sum: the allgathered upstream gradient times the number of processes.
    np.testing.assert_array_equal(g.numpy(), ((owner + 1) * n).astype(np.float32))


def test_alltoall_gradient(world, nm):
    n = world.size
    g = _grad(lambda t: dadt.alltoall(t, name=nm()), tf.ones([n, 1]), world, False)
    np.testing.assert_array_equal(g.numpy(), (np.arange(n).reshape(-1, 1) + 1).astype(np.float32))


def test_variable_inputs(world, nm):
    v = tf.Variable(np.full(3, world.rank + 1, np.float32))
    out = dadt.allreduce(v, name=nm("ar"), op=dadt.Sum)
    b = dadt.broadcast(v, world.size - 1, name=nm("bc"))
    np.testing.assert_array_equal(out.numpy(), np.full(3, sum(range(1, world.size + 1)), np.float32))
    np.testing.assert_array_equal(b.numpy(), np.full(3, world.size, np.float32))
    np.testing.assert_array_equal(v.numpy(), np.full(3, world.rank + 1, np.float32))  # input untouched


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_distributed_gradient_tape(world, nm, compiled):
    a = tf.Variable(tf.ones([2]))
    b = tf.Variable(tf.ones([3], tf.float64))
    unused = tf.Variable(1.0)

    def run():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(a) * (world.rank + 1) + tf.cast(tf.reduce_sum(b), tf.float32) * world.rank
        tape = dadt.DistributedGradientTape(tape)
        return tape.gradient(loss, {"a": a, "b": b, "unused": unused})
    grads = (tf.function(run) if compiled else run)()
    assert grads["unused"] is None
    np.testing.assert_allclose(grads["a"].numpy(), np.full(2, _mean_weight(world.size)), rtol=1e-6)
    np.testing.assert_allclose(grads["b"].numpy(), np.full(3, (world.size - 1) / 2), rtol=1e-12)


def test_distributed_gradient_tape_sum_and_predivide(world, nm):
    v = tf.Variable(tf.ones([2]))
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(v) * (world.rank + 1)
    g_sum = dadt.DistributedGradientTape(tape, op=dadt.Sum).gradient(loss, [v])[0]
    g_pre = dadt.DistributedGradientTape(tape, gradient_predivide_factor=2.0).gradient(loss, [v])[0]
    np.testing.assert_array_equal(g_sum.numpy(), np.full(2, sum(range(1, world.size + 1)), np.float32))
    np.testing.assert_allclose(g_pre.numpy(), np.full(2, _mean_weight(world.size)), rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_broadcast_variables(world, nm, compiled):
    vs = [tf.Variable(np.full(4, world.rank, np.float32)), tf.Variable(np.full((2, 3), world.rank, np.int64)),
          tf.Variable(np.full(1, world.rank, np.float16))]
    root = world.size - 1
    fn = (lambda: dadt.broadcast_variables(vs, root_rank=root, name=nm()))
    (tf.function(fn) if compiled else fn)()
    for v in vs:
        np.testing.assert_array_equal(v.numpy(), np.full(v.shape, root, v.dtype.as_numpy_dtype))


def test_objects(world, nm):
    obj = dadt.broadcast_object({"rank": world.rank, "tag": "x" * world.rank}, root_rank=world.size - 1, name=nm("b"))
    every = dadt.allgather_object(("r", world.rank), name=nm("g"))
    assert obj == {"rank": world.size - 1, "tag": "x" * (world.size - 1)}
    assert every == [("r", r) for r in range(world.size)]

    bcast = dadt.broadcast_object_fn(root_rank=0, name=nm("fn"))  # Horovod's TF1 helper
    assert bcast({"from": world.rank}) == {"from": 0}


def test_fp16_compression(world, nm):
    out = dadt.allreduce(tf.fill([5], float(world.rank + 1)), name=nm(), op=dadt.Sum, compression=dadt.Compression.fp16)
    assert out.dtype == tf.float32
    np.testing.assert_array_equal(out.numpy(), np.full(5, sum(range(1, world.size + 1)), np.float32))


def test_indexed_slices_are_reduced_dense(world, nm):
    emb = tf.Variable(tf.ones([4, 2]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(emb, [world.rank % 4])) * (world.rank + 1)
    g = dadt.DistributedGradientTape(tape, op=dadt.Sum).gradient(loss, [emb])[0]
    want = np.zeros((4, 2), np.float32)
    for r in range(world.size):
        want[r % 4] += r + 1
    np.testing.assert_array_equal(tf.convert_to_tensor(g).numpy(), want)
