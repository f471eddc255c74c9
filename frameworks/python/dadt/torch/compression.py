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


class PowerSGD:
    """``Compression.powersgd(...)``: low-rank gradient compression (PowerSGD, Vogels, Karimireddy
    and Jaggi, NeurIPS 2019) for DistributedOptimizer(mode="sync"). An instance holds the settings
    only; the optimizer keeps the state (Q, the error feedback) per parameter
    (training_modes/powersgd.py). Each gradient, viewed as an n x m matrix M (its first dimension
    by the rest, as torch's powerSGD_hook), goes as two allreduces of r(n + m) elements instead of
    n m:

        M <- G + E                       E: this rank's residual (error_feedback)
        P = avg_i(M_i Q); P <- orth(P)   Q: m x r, kept from the last step (warm_start)
        Q = avg_i(M_i^T P)
        G_avg ~= P Q^T;  E <- M - P Q^T

    Vectors (biases) and matrices where n m <= min_compression_rate * r (n + m) travel
    uncompressed, and every gradient does for the first start_iter reductions. The names
    are those of the issue; torch's PowerSGDState calls them matrix_approximation_rank,
    start_powerSGD_iter, min_compression_rate, use_error_feedback, warm_start and random_seed, with
    the same defaults. Plain collectives (allreduce(..., compression=)) refuse it."""

    def __init__(self, rank: int = 1, start_iter: int = 1000, min_compression_rate: float = 2.0,
                 error_feedback: bool = True, warm_start: bool = True, seed: int = 0):
        _check_int("rank", rank, 1)
        _check_int("start_iter", start_iter, 0)
        _check_int("seed", seed, 0)
        if isinstance(min_compression_rate, bool) or \
                not isinstance(min_compression_rate, (int, float)) or \
                not min_compression_rate >= 0 or min_compression_rate == float("inf"):
            raise ValueError("Compression.powersgd: min_compression_rate must be a finite number "
                             ">= 0, got %r" % (min_compression_rate,))
        for name, value in (("error_feedback", error_feedback), ("warm_start", warm_start)):
            if not isinstance(value, bool):
                raise ValueError("Compression.powersgd: %s must be True or False, got %r"
                                 % (name, value))
        self.rank = rank
        self.start_iter = start_iter
        self.min_compression_rate = float(min_compression_rate)
        self.error_feedback = error_feedback
        self.warm_start = warm_start
        self.seed = seed

    def __repr__(self):
        return ("Compression.powersgd(rank=%d, start_iter=%d, min_compression_rate=%g, "
                "error_feedback=%r, warm_start=%r, seed=%d)"
                % (self.rank, self.start_iter, self.min_compression_rate, self.error_feedback,
                   self.warm_start, self.seed))

    def matrix(self, shape):
        """(n, m, r) of a gradient of this shape if PowerSGD compresses it, else None: a tensor
        of two dimensions or more, viewed as shape[0] x the rest, whose n m elements exceed
        min_compression_rate times the r (n + m) of P and Q, r = min(rank, n, m) (torch's
        _should_compress)."""
        if len(shape) < 2:
            return None
        n = int(shape[0])
        m = 1
        for d in shape[1:]:
            m *= int(d)
        r = min(self.rank, n, m)
        if r == 0 or n * m <= self.min_compression_rate * r * (n + m):
            return None
        return n, m, r

    def compress(self, tensor):
        raise ValueError("Compression.powersgd is for DistributedOptimizer(mode='sync'), which "
                         "keeps its per-parameter state; a plain collective cannot take it")

    def decompress(self, tensor, ctx):
        return tensor

    @staticmethod
    def check_compression(compression, mode: str, sends_weights: bool):
        """Refuses (ValueError) PowerSGD where DistributedOptimizer(mode=mode) cannot run it, and
        the class passed uncalled; nothing for another compression. `sends_weights`: the mode
        exchanges the model (local_sgd, diloco, easgd), not gradients."""
        if compression is PowerSGD:
            raise ValueError("compression=Compression.powersgd must be called with its settings, "
                             "e.g. Compression.powersgd(rank=2, start_iter=100)")
        if not isinstance(compression, PowerSGD) or mode == "sync":
            return
        if sends_weights:
            raise ValueError("Compression.powersgd compresses gradients; mode=%r sends the model "
                             "(or its change) every sync_every steps, not gradients: use "
                             "Compression.fp16, bf16 or int8 there, or mode='sync'" % mode)
        if mode in ("async", "dear"):
            raise ValueError("Compression.powersgd works with mode='sync' only: mode=%r reduces "
                             "flat buckets of several gradients, which a per-matrix P and Q do "
                             "not fit (docs/training-modes.md, PowerSGD)" % mode)
        raise ValueError("Compression.powersgd works with mode='sync' only, not mode=%r "
                         "(docs/training-modes.md, PowerSGD)" % mode)


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError("Compression.powersgd: %s must be an int >= %d, got %r"
                         % (name, low, value))


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

    """mode="sync" only: each gradient matrix as two rank-r factors, with error feedback
    (PowerSGD); call it with its settings: Compression.powersgd(rank=2, start_iter=100)."""
    powersgd = PowerSGD


# The name dadt.common.periodic gives each compressor (what the modes that send less send).
WIRE_NAMES = {NoneCompressor: "none", FP16Compressor: "fp16", BF16Compressor: "bf16",
              Int8Compressor: "int8"}
