"""dadt.tensorflow in graphs: many collectives in one tf.compat.v1 Session.run and in one tf.function
with few TensorFlow threads (each collective must not hold a thread while it waits for its partners),
the broadcast gradient in a graph, and TensorFlow's error classes in graph and eager mode.

A regression here hangs rather than fails: conftest.py's watchdog ends the rank with every thread's
traceback after DADT_TEST_WATCHDOG_S seconds, and dadtrun then fails the launch.
"""
import numpy as np
import pytest
import tensorflow as tf

import dadt.tensorflow as dadt

N_ALLREDUCE = 40


def _collectives(world, prefix, reverse):
    """64 collectives (40 allreduces, a fused allreduce of 8, even and uneven reducescatters,
    allgathers, broadcasts, alltoalls, grouped allgather and reducescatter) and their expected
    values. ``reverse``: create them in the opposite order (ranks then disagree on the order)."""
    n, r = world.size, world.rank
    builders = []
    for i in range(N_ALLREDUCE):
        builders.append((lambda i=i: dadt.allreduce(tf.constant([float(i + r)]), name="%s.ar%d" % (prefix, i),
                                                    op=dadt.Sum),
                         [np.array([n * i + sum(range(n))], np.float32)]))
    builders.append((lambda: dadt.grouped_allreduce([tf.fill([3], float(r + k)) for k in range(8)],
                                                    name=prefix + ".grouped", op=dadt.Sum),
                     [np.full(3, n * k + sum(range(n)), np.float32) for k in range(8)]))
    for rows in (2 * n, 2 * n + 1):  # even and uneven
        mine = 2 + (1 if r < rows - 2 * n else 0)
        for k in range(2):
            builders.append((lambda rows=rows, k=k: dadt.reducescatter(tf.ones([rows, 2]) * (k + 1),
                                                                       name="%s.rs%d.%d" % (prefix, rows, k), op=dadt.Sum),
                             [np.full((mine, 2), n * (k + 1), np.float32)]))
    for k in range(4):
        builders.append((lambda k=k: dadt.allgather(tf.fill([r + 1], float(r + k)), name="%s.ag%d" % (prefix, k)),
                         [np.concatenate([np.full(q + 1, float(q + k), np.float32) for q in range(n)])]))
        builders.append((lambda k=k: dadt.broadcast(tf.constant([float(r * 10 + k)]), k % n,
                                                    name="%s.bc%d" % (prefix, k)),
                         [np.array([(k % n) * 10 + k], np.float32)]))
    for k in range(2):
        builders.append((lambda k=k: dadt.alltoall(tf.fill([n], float(r + k)), name="%s.a2a%d" % (prefix, k)),
                         [np.arange(n, dtype=np.float32) + k]))
    builders.append((lambda: dadt.grouped_allgather([tf.fill([1], float(r)), tf.fill([2], float(r))],
                                                    name=prefix + ".gag"),
                     [np.arange(n, dtype=np.float32), np.repeat(np.arange(n, dtype=np.float32), 2)]))
    builders.append((lambda: dadt.grouped_reducescatter([tf.ones([n, 1]), tf.ones([n + 1, 1])],
                                                        name=prefix + ".grs", op=dadt.Sum),
                     [np.full((1, 1), n, np.float32), np.full((2 if r == 0 else 1, 1), n, np.float32)]))
    order = list(reversed(builders)) if reverse else builders
    outs, wants = [], []
    for build, want in order:
        out = build()
        outs.extend(out if isinstance(out, list) else [out])
        wants.extend(want)
    assert len(outs) == 66  # one output per runtime collective (the fused members counted singly)
    return outs, wants


def _check(got, wants):
    assert len(got) == len(wants)
    for g, w in zip(got, wants):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("threads", [1, 0], ids=["1-thread", "default-threads"])
def test_many_collectives_in_one_session_run(world, nm, threads):
    # Odd ranks build the graph in reverse: Session.run may then schedule any of them first.
    with tf.Graph().as_default() as graph:
        outs, wants = _collectives(world, nm(), reverse=world.rank % 2 == 1)
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        for _ in range(2):  # the same graph again: the same names, once more
            _check(session.run(outs), wants)


def test_many_collectives_in_one_tf_function(world, nm):
    @tf.function
    def step():
        return _collectives(world, nm(), reverse=False)[0]
    _, wants = _collectives_expected(world)
    for _ in range(2):
        _check(step(), wants)


def _collectives_expected(world):
    with tf.Graph().as_default():
        return _collectives(world, "expected", reverse=False)


def test_broadcast_gradient_in_a_graph(world, nm):
    # Every rank computes the allreduce of the gradient; non-root ranks used to prune it.
    with tf.Graph().as_default() as graph:
        x = tf.ones([4])
        y = dadt.broadcast(x, 0, name=nm("bc"))
        (g,) = tf.compat.v1.gradients(tf.reduce_sum(y * float(world.rank + 1)), [x])
    with tf.compat.v1.Session(graph=graph) as session:
        got = session.run(g)
    want = sum(range(1, world.size + 1)) / world.size if world.rank == 0 else 0.0
    np.testing.assert_allclose(got, np.full(4, want, np.float32), rtol=1e-6)


@pytest.mark.usefixtures("multi_rank")
@pytest.mark.parametrize("mode", ["eager", "tf.function", "session"])
def test_mismatch_is_failed_precondition(world, nm, mode):
    x = np.ones((2, world.rank + 1), np.float32)
    fn = lambda t: dadt.allreduce(t, name=nm("bad"), op=dadt.Sum)  # noqa: E731
    with pytest.raises(tf.errors.FailedPreconditionError, match="bad"):
        _run(mode, fn, x)
    # The job goes on, and a graph may run again with matching shapes.
    ok = _run(mode, lambda t: dadt.allreduce(t, name=nm("ok"), op=dadt.Sum), np.ones(3, np.float32))
    np.testing.assert_array_equal(ok, np.full(3, world.size, np.float32))


@pytest.mark.usefixtures("multi_rank")
def test_mismatch_is_also_tensor_mismatch_error_eagerly(world, nm):
    with pytest.raises(dadt.TensorMismatchError) as info:
        dadt.broadcast(tf.ones([2]), world.rank, name=nm("root"))
    assert isinstance(info.value, tf.errors.FailedPreconditionError)


@pytest.mark.parametrize("mode", ["eager", "tf.function", "session"])
def test_bad_alltoall_splits_are_invalid_argument(world, nm, mode):
    x = np.ones((world.size, 1), np.float32)
    bad = [world.size + 1] + [0] * (world.size - 1)  # more rows than the tensor has
    with pytest.raises(tf.errors.InvalidArgumentError, match="split"):
        _run(mode, lambda t: dadt.alltoall(t, splits=bad, name=nm("bad"))[0], x)


def _run(mode, fn, x):
    """fn(x) eagerly, in a tf.function or in a tf.compat.v1 Session; returns a NumPy array."""
    if mode == "eager":
        return fn(tf.constant(x)).numpy()
    if mode == "tf.function":
        return tf.function(fn)(tf.constant(x)).numpy()
    with tf.Graph().as_default() as graph:
        out = fn(tf.constant(x))
    with tf.compat.v1.Session(graph=graph) as session:
        return session.run(out)


def test_rank_and_size_ops(world):
    eager = [int(op()) for op in (dadt.rank_op, dadt.size_op, dadt.local_rank_op, dadt.local_size_op)]
    with tf.Graph().as_default() as graph:
        ops = [dadt.rank_op(), dadt.size_op(), dadt.local_rank_op(), dadt.local_size_op()]
    with tf.compat.v1.Session(graph=graph) as session:
        in_graph = [int(v) for v in session.run(ops)]
    want = [world.rank, world.size, dadt.local_rank(), dadt.local_size()]
    assert eager == want and in_graph == want and all(o.dtype == tf.int32 for o in ops)


def test_broadcast_global_variables(world, nm):
    with pytest.raises(RuntimeError, match="graph mode"):
        dadt.broadcast_global_variables(0)
    with tf.Graph().as_default() as graph:
        v = tf.compat.v1.Variable(np.full(3, world.rank, np.float32))
        w = tf.compat.v1.Variable(np.full(2, world.rank, np.int64))
        bcast = dadt.broadcast_global_variables(world.size - 1)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(bcast)
        got_v, got_w = session.run([v, w])
    np.testing.assert_array_equal(got_v, np.full(3, world.size - 1, np.float32))
    np.testing.assert_array_equal(got_w, np.full(2, world.size - 1, np.int64))


@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_distributed_optimizer_of_a_tf1_optimizer(world, op):
    # Horovod's DistributedOptimizer of a tf.compat.v1.train optimizer: minimize() runs the wrapped
    # compute_gradients, reduced across ranks, then the wrapped apply_gradients.
    n, r = world.size, world.rank
    with tf.Graph().as_default() as graph:
        w = tf.compat.v1.Variable([1.0, 2.0])
        local = tf.compat.v1.Variable([0.0])
        loss = tf.reduce_sum(w) * float(r + 1) + tf.reduce_sum(local) * float(r + 1)
        opt = dadt.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                        op=getattr(dadt, op))
        assert isinstance(opt, tf.compat.v1.train.Optimizer)
        opt.register_local_var(local)
        train = opt.minimize(loss, var_list=[w, local])
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(train)
        got_w, got_local = session.run([w, local])
    grad = sum(range(1, n + 1)) / (n if op == "Average" else 1)
    np.testing.assert_allclose(got_w, [1.0 - 0.5 * grad, 2.0 - 0.5 * grad], rtol=1e-6)
    np.testing.assert_allclose(got_local, [-0.5 * (r + 1) / n], rtol=1e-6)  # kept, scaled


def test_distributed_optimizer_refuses_other_optimizers():
    with pytest.raises(ValueError, match="tf.compat.v1.train.Optimizer or a Keras optimizer"):
        dadt.DistributedOptimizer(object())
