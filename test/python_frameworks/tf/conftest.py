"""The `fw` adapter for dadt.tensorflow (see ../cases.py); initialises dadt once per session."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import dadt.tensorflow as dadt  # noqa: E402
from values import world as _world  # noqa: E402


class TensorFlowAdapter:
    dadt = dadt
    compiled_error = tf.errors.OpError

    @staticmethod
    def tensor(array):
        return tf.convert_to_tensor(array)

    @staticmethod
    def numpy(tensor):
        return np.asarray(tensor.numpy())

    @staticmethod
    def compile(fn):
        return tf.function(fn)

    @staticmethod
    def world():
        return _world(dadt)


@pytest.fixture(scope="session", autouse=True)
def dadt_session():
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    dadt.init()
    yield
    dadt.shutdown()


@pytest.fixture(scope="session")
def fw():
    return TensorFlowAdapter
