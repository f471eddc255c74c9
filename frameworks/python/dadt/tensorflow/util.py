"""Horovod's ``horovod.tensorflow.util`` helpers that scripts and test suites call through the
module (``hvd.util._executing_eagerly()``, ``hvd._executing_eagerly()``)."""

import tensorflow as tf

__all__ = ["_executing_eagerly"]


def _executing_eagerly() -> bool:
    """True when TensorFlow runs eagerly here: not in a tf.function being traced, nor in a
    tf.compat.v1 graph (eager execution disabled or a ``Graph.as_default()`` block)."""
    return tf.executing_eagerly()
