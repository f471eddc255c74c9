"""Gradient compression for dadt.tensorflow (Horovod's ``hvd.Compression``): ``none`` sends
tensors as they are, ``fp16`` sends floating-point tensors as float16 and casts the result back."""

import tensorflow as tf


class _Identity:
    """Sends tensors unchanged (the default)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _HalfPrecision:
    """Floating-point tensors travel as float16; others unchanged."""

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """Optional gradient compression used by allreduce: ``Compression.none`` (default) or
    ``Compression.fp16``."""
    none = _Identity
    fp16 = _HalfPrecision
