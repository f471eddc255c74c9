"""SyncBatchNormalization: batch normalization whose batch statistics cover every process's
batch (Horovod's ``hvd.SyncBatchNormalization``), for Keras 3 with the TensorFlow backend."""

import keras
import tensorflow as tf

from dadt.common.basics import size
from dadt.common.util import Sum
from dadt.tensorflow.mpi_ops import allreduce

__all__ = ["SyncBatchNormalization"]


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization whose training-time mean and variance are those of the
    global batch: each process's element count, sum and sum of squares are summed by one
    allreduce, so that processes with batches of different sizes are weighted by their size.
    Inference uses the moving statistics, as BatchNormalization does. Masks are not supported
    (a masked call normalizes with this process's statistics)."""

    def _moments(self, inputs, mask):
        if mask is not None or size() == 1:
            return super()._moments(inputs, mask)
        axes = list(self._reduction_axes)
        x = tf.convert_to_tensor(inputs)
        dtype = tf.float64 if x.dtype == tf.float64 else tf.float32
        x = tf.cast(x, dtype)
        shape = tf.shape(x)
        count = tf.cast(tf.reduce_prod(tf.gather(shape, axes)), dtype)
        total = tf.reduce_sum(x, axis=axes)
        squares = tf.reduce_sum(tf.square(x), axis=axes)
        stats = allreduce(tf.concat([tf.reshape(count, [1]), tf.reshape(total, [-1]),
                                     tf.reshape(squares, [-1])], axis=0), op=Sum)
        n = tf.size(total)
        global_count = stats[0]
        mean = tf.reshape(stats[1:1 + n], tf.shape(total)) / global_count
        mean_of_squares = tf.reshape(stats[1 + n:], tf.shape(total)) / global_count
        variance = tf.maximum(mean_of_squares - tf.square(mean), 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)
