"""Gradient compression algorithms (Horovod's Compressor API)."""

import torch

from dadt.common.periodic import Int8Compressor


class Compressor:
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor and returns it with the context needed to decompress it."""

    @staticmethod
    def decompress(tensor, ctx):
        """Decompresses the tensor with the given context."""


class NoneCompressor(Compressor):
    """Default no-op compression."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor unmodified."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor unmodified."""
        return tensor


def _device_cast(tensor, dtype):
    """float32 <-> float16 of a CUDA tensor by dadt's own kernel on the current stream (the CUDA
    build); None where that does not apply."""
    # Not for tensors in an autograd graph: the kernel would cut it (torch.Tensor.type keeps it).
    if not tensor.is_cuda or tensor.requires_grad or \
            {tensor.dtype, dtype} != {torch.float32, torch.float16}:
        return None
    from dadt.common.basics import _core
    if "nccl" not in _core.built_backends() or not tensor.is_contiguous():
        return None
    import torch.utils.dlpack as dlpack
    out = torch.empty(tensor.shape, dtype=dtype, device=tensor.device)
    _core.cuda_cast(dlpack.to_dlpack(tensor.detach()), dlpack.to_dlpack(out),
                    torch.cuda.current_stream(tensor.device).cuda_stream)
    return out


class FP16Compressor(Compressor):
    """Compress all floating point gradients to 16-bit (on the GPU for CUDA tensors)."""

    @staticmethod
    def compress(tensor):
        """Downcasts the tensor to 16-bit."""
        tensor_compressed = tensor
        on_device = _device_cast(tensor, torch.float16)
        if on_device is not None:
            tensor_compressed = on_device
        elif tensor.dtype.is_floating_point:
            # Only allow compression from other floating point types
            tensor_compressed = tensor.type(torch.float16)
        return tensor_compressed, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Upcasts the tensor to the initialization dtype."""
        tensor_decompressed = tensor
        dtype = ctx
        on_device = _device_cast(tensor, dtype) if dtype.is_floating_point else None
        if on_device is not None:
            tensor_decompressed = on_device
        elif dtype.is_floating_point:
            tensor_decompressed = tensor.type(dtype)
        return tensor_decompressed


class BF16Compressor(Compressor):
    """Compress all floating point gradients to bfloat16: float32's range with 8 bits of mantissa,
    so large gradients do not overflow as they can in float16."""

    @staticmethod
    def compress(tensor):
        """Downcasts a floating point tensor to bfloat16."""
        if tensor.dtype.is_floating_point:
            return tensor.to(torch.bfloat16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        """Upcasts the tensor to the dtype it was compressed from."""
        return tensor.to(ctx) if ctx.is_floating_point else tensor



class Compression:
    """Optional gradient compression algorithm used during allreduce."""

    """Do not compress the gradients. This is the default."""
    none = NoneCompressor

    """Compress all floating point gradients to 16-bit."""
    fp16 = FP16Compressor

    """Compress all floating point gradients to bfloat16 (float32's range, 8-bit mantissa)."""
    bf16 = BF16Compressor

    """mode="diloco" and "local_sgd" only: what they exchange as int8 with a scale, with error
    feedback."""
    int8 = Int8Compressor


# The name dadt.common.periodic gives each compressor (what the modes that send less send).
WIRE_NAMES = {NoneCompressor: "none", FP16Compressor: "fp16", BF16Compressor: "bf16",
              Int8Compressor: "int8"}
