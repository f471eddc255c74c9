"""Process sets in dadt.tensorflow and dadt.keras: an allreduce (eager and in tf.function), the
gradient of a reducescatter, DistributedGradientTape and the Keras DistributedOptimizer, each on
the even and the odd ranks as two sets at once."""
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
