"""Gradient compression for DistributedTrainer (Horovod's horovod.mxnet.compression): what a
gradient travels as. ``compress`` returns the tensor to reduce and what ``decompress`` needs to
turn the reduced tensor back into the gradient's dtype."""

import numpy as np

__all__ = ["Compression", "Compressor", "NoneCompressor", "FP16Compressor"]


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, ctx)``, ``decompress(tensor, ctx) -> tensor``."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends gradients as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point gradients as float16 (others as they are)."""

    @staticmethod
    def compress(tensor):
        dtype = np.dtype(tensor.dtype)
        if dtype.kind == "f" and dtype != np.float16:
            return tensor.astype(np.float16), dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.astype(ctx)


class Compression:
    """Gradient compression for DistributedTrainer: ``Compression.none`` (default) or
    ``Compression.fp16``."""
    none = NoneCompressor
    fp16 = FP16Compressor
