"""The `fw` adapter for dadt.jax (see ../cases.py); initialises dadt once per session."""
import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # test_keras_jax.py: dadt.keras on Keras' jax backend

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # int64 and float64 stay 64-bit

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import dadt.jax as dadt  # noqa: E402
from values import world as _world  # noqa: E402


class JaxAdapter:
    dadt = dadt
    compiled_error = Exception  # jax wraps a failing host callback in its runtime error type

    @staticmethod
    def tensor(array):
        return jnp.asarray(array)

    @staticmethod
    def numpy(array):
        return np.asarray(array)

    @staticmethod
    def compile(fn):
        return jax.jit(fn)

    @staticmethod
    def world():
        return _world(dadt)


@pytest.fixture(scope="session", autouse=True)
def dadt_session():
    dadt.init()
    yield
    dadt.shutdown()


@pytest.fixture(scope="session")
def fw():
    return JaxAdapter
