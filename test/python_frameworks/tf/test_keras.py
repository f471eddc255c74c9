"""dadt.keras: DistributedOptimizer and the callbacks under model.fit (tensorflow backend)."""
import keras
import numpy as np
import pytest

import dadt.keras as dadt


def _model(init):
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer=keras.initializers.Constant(init))])
    return model


def test_distributed_optimizer_averages_gradients(world):
    # loss (w - rank)^2 at w = 0 has gradient -2 * rank; averaged and stepped with lr 0.5, w = mean(rank).
    model = _model(0.0)
    opt = dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.5))
    assert isinstance(opt, keras.optimizers.SGD)
    model.compile(optimizer=opt, loss="mse")
    model.fit(np.ones((1, 1), np.float32), np.full((1, 1), world.rank, np.float32), batch_size=1, epochs=1, verbose=0)
    w = float(model.layers[0].kernel.numpy().reshape(()))
    assert abs(w - (world.size - 1) / 2) < 1e-6, w


def test_callbacks(world):
    # Different initial weights per rank; lr 0 after broadcast: every rank holds rank 0's weight.
    model = _model(float(world.rank + 10))
    model.compile(optimizer=dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.0)), loss="mse")
    history = model.fit(np.ones((2, 1), np.float32), np.full((2, 1), world.rank, np.float32), batch_size=1,
                        epochs=2, verbose=0, callbacks=[dadt.callbacks.BroadcastGlobalVariablesCallback(0),
                                                        dadt.callbacks.MetricAverageCallback()])
    w = float(model.layers[0].kernel.numpy().reshape(()))
    weights = dadt.allgather(np.array([w], np.float32), name="keras.callbacks.w")
    assert w == 10.0 and np.all(weights == 10.0), weights
    # Each rank's loss is (10 - rank)^2; the callback averages it over ranks.
    want = np.mean([(10.0 - r) ** 2 for r in range(world.size)])
    assert abs(history.history["loss"][-1] - want) < 1e-3, history.history["loss"]


def test_learning_rate_warmup(world):
    cb = dadt.callbacks.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2, steps_per_epoch=4)
    assert abs(cb.learning_rate(0) - 0.4 / world.size) < 1e-12
    assert abs(cb.learning_rate(2) - 0.4) < 1e-12
    assert cb.learning_rate(0) <= cb.learning_rate(1) <= cb.learning_rate(2)
    model = _model(0.0)
    model.compile(optimizer=dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.4)), loss="mse")
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: seen.append(float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))))
    model.fit(np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32), batch_size=1, epochs=3, verbose=0,
              callbacks=[cb, record])
    assert abs(seen[0] - 0.4 / world.size) < 1e-6 and abs(seen[-1] - 0.4) < 1e-6, seen


def test_numpy_collectives(world):
    s = dadt.allreduce(np.array([world.rank], np.float64), name="keras.np.ar", op=dadt.Sum)
    b = dadt.broadcast(np.array([world.rank]), world.size - 1, name="keras.np.bc")
    assert s[0] == sum(range(world.size)) and b[0] == world.size - 1


def test_tensorflow_keras_module():
    # Horovod scripts import horovod.tensorflow.keras; dadt.tensorflow.keras is the same API.
    import dadt.tensorflow.keras as hvd
    from dadt.tensorflow.keras.callbacks import BroadcastGlobalVariablesCallback
    assert hvd.DistributedOptimizer is dadt.DistributedOptimizer
    assert hvd.callbacks.BroadcastGlobalVariablesCallback is BroadcastGlobalVariablesCallback
    assert hvd.rank() == dadt.rank() and hvd.SyncBatchNormalization is not None


def test_broadcast_callback_keeps_local_variables(world):
    shared = keras.layers.Dense(1, use_bias=False, kernel_initializer=keras.initializers.Constant(world.rank + 10.0))
    local = keras.layers.Dense(1, use_bias=False, kernel_initializer=keras.initializers.Constant(world.rank + 20.0))
    model = keras.Sequential([keras.Input((1,)), shared, local])
    model.compile(optimizer=dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.0)), loss="mse")
    cb = dadt.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local.kernel])
    model.fit(np.ones((1, 1), np.float32), np.ones((1, 1), np.float32), epochs=1, verbose=0, callbacks=[cb])
    assert float(shared.kernel.numpy().reshape(())) == 10.0
    assert float(local.kernel.numpy().reshape(())) == world.rank + 20.0


def test_backward_passes_per_step(world):
    # loss (w - rank)^2 at w = 0: gradient -2 * rank each step. Two passes are summed (Horovod's
    # default), averaged across ranks, and applied once: w = 0.25 * 2 * 2 * mean(rank) after 2 steps.
    model = _model(0.0)
    opt = dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.25), backward_passes_per_step=2)
    model.compile(optimizer=opt, loss="mse")
    x, y = np.ones((2, 1), np.float32), np.full((2, 1), world.rank, np.float32)
    model.fit(x, y, batch_size=1, epochs=1, verbose=0, shuffle=False)
    w = float(model.layers[0].kernel.numpy().reshape(()))
    assert abs(w - 0.25 * 2 * 2 * (world.size - 1) / 2) < 1e-6, w


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_distributed_optimizer_sparse_gradients(world, sparse_as_dense):
    # An embedding's gradient is a tf.IndexedSlices; rank r looks up row r: every rank gets every
    # rank's row gradient, averaged.
    model = keras.Sequential([keras.Input((1,), dtype="int32"),
                              keras.layers.Embedding(4, 1, embeddings_initializer="zeros"),
                              keras.layers.Flatten()])
    opt = dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.5), sparse_as_dense=sparse_as_dense)
    model.compile(optimizer=opt, loss="mse")
    model.fit(np.full((1, 1), world.rank, np.int32), np.ones((1, 1), np.float32), batch_size=1, epochs=1, verbose=0)
    table = model.layers[0].embeddings.numpy().reshape(-1)
    # d/de (e - 1)^2 = -2 at e = 0, averaged over size ranks, lr 0.5: each looked-up row gains 1/size.
    want = np.array([1.0 / world.size if i < world.size else 0.0 for i in range(4)], np.float32)
    np.testing.assert_allclose(table, want, rtol=1e-6)


def test_partial_distributed_optimizer(world):
    shared = keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")
    local = keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")
    inp = keras.Input((1,))
    model = keras.Model(inp, keras.layers.Add()([shared(inp), local(inp)]))
    opt = dadt.PartialDistributedOptimizer(keras.optimizers.SGD(learning_rate=0.5), local_layers=[local])
    model.compile(optimizer=opt, loss="mse")
    model.fit(np.ones((1, 1), np.float32), np.full((1, 1), world.rank, np.float32), batch_size=1, epochs=1, verbose=0)
    # Gradient -2 * rank for both; shared: averaged; local: this rank's, divided by size (Horovod).
    assert abs(float(shared.kernel.numpy().reshape(())) - (world.size - 1) / 2) < 1e-6
    assert abs(float(local.kernel.numpy().reshape(())) - world.rank / world.size) < 1e-6


@pytest.mark.parametrize("initial_lr", [0.8, None], ids=["initial_lr", "optimizer_lr"])
def test_learning_rate_schedule(world, initial_lr):
    # Without initial_lr (Horovod's older form) the optimizer's rate when training begins is the base.
    model = _model(0.0)
    model.compile(optimizer=dadt.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0 if initial_lr else 0.8)),
                  loss="mse")
    schedule = dadt.callbacks.LearningRateScheduleCallback(initial_lr=initial_lr, multiplier=lambda e: 0.5 ** e,
                                                           start_epoch=1, end_epoch=3)
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda e, logs: seen.append(float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))))
    model.fit(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32), epochs=4, verbose=0,
              callbacks=[schedule, record])
    first = 1.0 if initial_lr else 0.8  # epoch 0 is before start_epoch: the optimizer's own rate
    np.testing.assert_allclose(seen, [first, 0.4, 0.2, 0.2], rtol=1e-6)
