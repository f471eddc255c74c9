"""dadt.tensorflow's Horovod API beyond the basic collectives: sparse gradients (tf.IndexedSlices),
grouped allgather and reducescatter, in-place broadcast_, local sources and
PartialDistributedGradientTape, SyncBatchNormalization; eager and in tf.function."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import dadt.tensorflow as dadt

MODES = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])


def _maybe_compiled(fn, compiled):
    return tf.function(fn) if compiled else fn


@MODES
def test_indexed_slices_allreduce_allgathers_rows(world, nm, compiled):
    # Each rank contributes row (rank % 4) with value rank + 1; Average divides values by size.
    def fn():
        s = tf.IndexedSlices(tf.fill([1, 2], float(world.rank + 1)), tf.constant([world.rank % 4]),
                             dense_shape=tf.constant([4, 2]))
        out = dadt.allreduce(s, name=nm("avg"))
        grouped = dadt.grouped_allreduce([s, tf.ones([2])], name=nm("grp"), op=dadt.Sum)
        return out.values, out.indices, tf.convert_to_tensor(out), grouped[0].values, grouped[1]
    values, indices, dense, g_values, g_dense = _maybe_compiled(fn, compiled)()
    n = world.size
    np.testing.assert_array_equal(indices.numpy(), np.arange(n) % 4)
    np.testing.assert_allclose(values.numpy(), np.repeat(np.arange(1, n + 1, dtype=np.float32) / n, 2).reshape(n, 2))
    want = np.zeros((4, 2), np.float32)
    for r in range(n):
        want[r % 4] += (r + 1) / n
    np.testing.assert_allclose(dense.numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(g_values.numpy(), np.repeat(np.arange(1, n + 1, dtype=np.float32), 2).reshape(n, 2))
    np.testing.assert_array_equal(g_dense.numpy(), np.full(2, n, np.float32))


@MODES
def test_indexed_slices_average_of_integers_divides(world, nm, compiled):
    # Horovod divides the allgathered values with TensorFlow's "/": integers come back as floats
    # (float32 from 8- and 16-bit integers, float64 from wider ones), never truncated to zeros.
    rows = np.array([[4, 6, 8], [8, 12, 16]])

    def fn():
        def slices(dtype):
            return tf.IndexedSlices(tf.constant(rows, dtype), tf.constant([0, 1]), tf.constant([2, 3]))
        out = dadt.allreduce(slices(tf.uint8), name=nm("u8"))
        wide = dadt.allreduce(slices(tf.int32), name=nm("i32"))
        grouped = dadt.grouped_allreduce([slices(tf.uint8), slices(tf.int64)], name=nm("grp"))
        mixed = dadt.grouped_allreduce([tf.fill([2], 2.0), slices(tf.int8)], name=nm("mix"))
        return [out.values, wide.values, grouped[0].values, grouped[1].values, mixed[1].values,
                mixed[0]]
    got = _maybe_compiled(fn, compiled)()
    want = np.tile(rows, (world.size, 1)) / world.size
    for values, dtype in zip(got[:5], [tf.float32, tf.float64, tf.float32, tf.float64, tf.float32]):
        assert values.dtype == dtype
        np.testing.assert_allclose(values.numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(got[5].numpy(), np.full(2, 2.0, np.float32))


@pytest.mark.parametrize("factor", ["prescale_factor", "postscale_factor"])
def test_indexed_slices_refuse_scale_factors(nm, factor):
    # As Horovod: NotImplementedError, raised before anything is sent (the ranks go on).
    s = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), tf.constant([2, 2]))
    for call in (lambda: dadt.allreduce(s, name=nm("one"), **{factor: 2.0}),
                 lambda: dadt.grouped_allreduce([s, s], name=nm("grp"), **{factor: 2.0}),
                 lambda: dadt.grouped_allreduce([tf.ones([2]), s], name=nm("mix"), **{factor: 2.0})):
        with pytest.raises(NotImplementedError, match="IndexedSlices"):
            call()


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_tape_sparse_gradients(world, nm, sparse_as_dense):
    emb = tf.Variable(tf.ones([4, 2]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(emb, [world.rank % 4])) * (world.rank + 1)
    g = dadt.DistributedGradientTape(tape, op=dadt.Sum, sparse_as_dense=sparse_as_dense).gradient(loss, [emb])[0]
    assert isinstance(g, tf.IndexedSlices) != sparse_as_dense
    want = np.zeros((4, 2), np.float32)
    for r in range(world.size):
        want[r % 4] += r + 1
    np.testing.assert_array_equal(tf.convert_to_tensor(g).numpy(), want)


@MODES
def test_grouped_allgather_and_reducescatter(world, nm, compiled):
    n, r = world.size, world.rank

    def fn(a, b):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([a, b])
            ga, gb = dadt.grouped_allgather([a, b], name=nm("ag"))
            ra, rb = dadt.grouped_reducescatter([a, b], name=nm("rs"), op=dadt.Sum)
            loss_g = tf.reduce_sum(ga) + tf.reduce_sum(gb)
            loss_r = tf.reduce_sum(ra) + tf.reduce_sum(rb)
        return ga, gb, ra, rb, tape.gradient(loss_g, [a, b]), tape.gradient(loss_r, [a, b])
    a = tf.fill([n, 1], float(r + 1))
    b = tf.fill([n + 1, 2], 1.0)
    ga, gb, ra, rb, grad_g, grad_r = _maybe_compiled(fn, compiled)(a, b)
    np.testing.assert_array_equal(ga.numpy(), np.repeat(np.arange(1, n + 1, dtype=np.float32), n).reshape(-1, 1))
    assert gb.shape == ((n + 1) * n, 2)
    np.testing.assert_array_equal(ra.numpy(), np.full((1, 1), sum(range(1, n + 1)), np.float32))
    np.testing.assert_array_equal(rb.numpy(), np.full((2 if r == 0 else 1, 2), n, np.float32))
    # allgather's gradient: the averaged ones (1); reducescatter Sum's: allgather(ones) * size.
    np.testing.assert_array_equal(grad_g[0].numpy(), np.ones((n, 1), np.float32))
    np.testing.assert_array_equal(grad_r[1].numpy(), np.full((n + 1, 2), n, np.float32))


@MODES
def test_broadcast_in_place(world, nm, compiled):
    vs = [tf.Variable(np.full(3, world.rank, np.float32)), tf.Variable(np.full(2, world.rank, np.int32))]
    out = _maybe_compiled(lambda: dadt.broadcast_(vs, root_rank=world.size - 1, name=nm()), compiled)()
    for v, o in zip(vs, out):
        np.testing.assert_array_equal(v.numpy(), np.full(v.shape, world.size - 1))
        np.testing.assert_array_equal(np.asarray(o), np.full(v.shape, world.size - 1))


@pytest.mark.parametrize("partial", [False, True], ids=["register_local_source", "PartialDistributedGradientTape"])
def test_local_sources_are_not_reduced(world, nm, partial):
    shared = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    local = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    x = tf.ones([1, 1])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared(x) + local(x)) * (world.rank + 1)
    if partial:
        dtape = dadt.PartialDistributedGradientTape(tape, local_layers=local)
    else:
        dtape = dadt.DistributedGradientTape(tape)
        dtape.register_local_source(local.kernel)
    g_shared, g_local = dtape.gradient(loss, [shared.kernel, local.kernel])
    n = world.size
    np.testing.assert_allclose(g_shared.numpy(), [[sum(range(1, n + 1)) / n]], rtol=1e-6)
    np.testing.assert_allclose(g_local.numpy(), [[(world.rank + 1) / n]], rtol=1e-6)  # scaled, not reduced


@MODES
def test_sync_batch_normalization(world, nm, compiled):
    # Ranks hold different batches (of different sizes): the statistics are the global batch's.
    n, r = world.size, world.rank
    batches = [np.arange(q + 1, dtype=np.float32).reshape(-1, 1) * (q + 1) for q in range(n)]
    everything = np.concatenate(batches)
    layer = dadt.SyncBatchNormalization(epsilon=0.0, momentum=0.0)
    out = _maybe_compiled(lambda t: layer(t, training=True), compiled)(tf.constant(batches[r]))
    want = (batches[r] - everything.mean()) / np.sqrt(everything.var())
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.moving_mean.numpy(), [everything.mean()], rtol=1e-5)


def test_executing_eagerly_helpers():
    # Horovod's scripts and tests call hvd._executing_eagerly() and hvd.util._executing_eagerly().
    assert dadt._executing_eagerly is dadt.util._executing_eagerly
    assert dadt.util._executing_eagerly()
    assert not tf.function(lambda: tf.constant(dadt.util._executing_eagerly()))().numpy()
    with tf.Graph().as_default():
        assert not dadt._executing_eagerly()


def test_build_queries_of_horovod():
    # Horovod's test files and scripts branch on these at import or construction time
    # (test_tensorflow_process_sets.py calls hvd.sycl_built() in its TestCase's __init__).
    import dadt.keras as dadt_keras
    for module in (dadt, dadt_keras):
        for name in ("ccl_built", "sycl_built", "ddl_built", "rocm_built"):
            assert getattr(module, name)() is False, name
        assert module.gloo_built() or module.mpi_built()
