"""dadt.keras: DistributedOptimizer and the callbacks under model.fit (tensorflow backend)."""
import keras
import numpy as np

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
