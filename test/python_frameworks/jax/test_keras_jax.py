"""dadt.keras on Keras' jax backend: model.fit's jitted step reduces gradients through dadt.jax."""
import keras
import numpy as np

import dadt.keras as dadt_keras


def test_fit_on_jax_backend(world):
    assert keras.backend.backend() == "jax"
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(
        1, use_bias=False, kernel_initializer=keras.initializers.Constant(float(world.rank + 3)))])
    model.compile(optimizer=dadt_keras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.5)), loss="mse")
    # After the broadcast w = 3 everywhere; loss (w - rank)^2 has gradient 2 (3 - rank); averaged
    # and stepped with lr 0.5: w = 3 - (3 - mean(rank)) = mean(rank).
    model.fit(np.ones((1, 1), np.float32), np.full((1, 1), world.rank, np.float32), batch_size=1, epochs=1,
              verbose=0, callbacks=[dadt_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    w = float(keras.ops.convert_to_numpy(model.layers[0].kernel.value).reshape(()))
    assert abs(w - (world.size - 1) / 2) < 1e-6, w
