"""Gradient compression for dadt.tensorflow (Horovod's ``hvd.Compression``): ``none`` sends
tensors as they are, ``fp16`` sends floating-point tensors as float16 and casts the result back,
``bf16`` as bfloat16 (float32's range, 8 bits of mantissa). ``int8`` is for the pseudo-gradient
of dadt.keras.DistributedOptimizer(mode="diloco") only (docs/frameworks.md, "Modes that send
less"). Each member's ``wire`` is its name in dadt.common.periodic."""

import tensorflow as tf

from dadt.common.periodic import Int8Compressor


class _Identity:
    """Sends tensors unchanged (the default)."""

    wire = "none"

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _Cast:
    """Floating-point tensors travel as ``dtype``; others unchanged."""

    dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating and tensor.dtype != cls.dtype:
            return tf.cast(tensor, cls.dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class _HalfPrecision(_Cast):
    """Floating-point tensors travel as float16."""

    wire = "fp16"
    dtype = tf.float16


class _BFloat16(_Cast):
    """Floating-point tensors travel as bfloat16: large gradients do not overflow as in float16."""

    wire = "bf16"
    dtype = tf.bfloat16


class Compression:
    """Optional compression of what is sent: ``Compression.none`` (default), ``Compression.fp16``,
    ``Compression.bf16``; ``Compression.int8`` for mode="diloco" only."""
    none = _Identity
    fp16 = _HalfPrecision
    bf16 = _BFloat16
    int8 = Int8Compressor
