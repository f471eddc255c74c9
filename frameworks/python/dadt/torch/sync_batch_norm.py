"""SyncBatchNorm: batch normalization over the batch of every rank (Horovod's ``hvd.SyncBatchNorm``).

In training, each rank computes the mean and (biased) variance of its own batch per channel, the
ranks allgather (count, mean, variance), and every rank combines them into the statistics of the
whole global batch with the parallel-variance formula (no sum-of-squares cancellation). Autograd
carries the gradient through the global statistics: the gather's backward sums every rank's
gradient of the gathered rows (an allreduce) and keeps the rank's own row. One collective in
forward and one in backward per layer. Eval mode (with running statistics) needs no communication.

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), dadt.SyncBatchNorm(16), ...)
    model = dadt.SyncBatchNorm.convert_sync_batchnorm(model)   # or convert an existing model

Every rank must run the same layers in the same order (as for every collective); a rank's batch
may be empty or of a different size from the others'.
"""
import torch
import torch.nn.functional as F

from dadt.common.basics import rank, size
from dadt.common.util import Sum
from dadt.torch import async_collectives
from dadt.torch.handles import synchronize

__all__ = ["SyncBatchNorm"]


class _GatherStats(torch.autograd.Function):
    """One row per rank, gathered; the gradient of a rank's row is the sum over every rank of the
    gradient of that row (the statistics feed every rank's loss). dadt.torch.allgather's gradient
    averages instead, as Horovod's does, which suits data but not shared statistics."""

    @staticmethod
    def forward(ctx, row):
        return synchronize(async_collectives.allgather_async(row))

    @staticmethod
    def backward(ctx, grad):
        summed = synchronize(async_collectives.allreduce_async(grad.contiguous(), op=Sum))
        return summed[rank()].unsqueeze(0)


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Applies batch normalization over an N-dimensional input (N >= 2, channels second), with
    the batch statistics of all ranks. Arguments are those of ``torch.nn.BatchNorm*d``."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("SyncBatchNorm expects input of at least 2 dimensions (batch, channels, "
                             "...), got %d" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError("SyncBatchNorm(num_features=%d) got %d channels (input shape %s)"
                             % (self.num_features, input.shape[1], tuple(input.shape)))
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        uses_batch_stats = self.training or not self.track_running_stats
        if not uses_batch_stats or size() == 1:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                                uses_batch_stats, factor, self.eps)
        mean, var, count = self._global_stats(input)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                unbiased = var.detach() * (count / (count - 1.0).clamp_min(1.0))
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype),
                                                        alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)
        shape = [1, self.num_features] + [1] * (input.dim() - 2)
        work = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        out = (work - mean.view(shape)) * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out.to(input.dtype)

    def _global_stats(self, input):
        """(mean, biased variance, element count) per channel over every rank's batch, as tensors."""
        channels = self.num_features
        dims = [0] + list(range(2, input.dim()))
        work = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        n = input.numel() // channels
        if n > 0:
            var, mean = torch.var_mean(work, dim=dims, unbiased=False)
        else:  # an empty batch contributes nothing (and no NaN)
            mean = var = work.new_zeros(channels)
        mine = torch.cat([mean, var, work.new_full((1,), float(n))]).unsqueeze(0)
        every = _GatherStats.apply(mine)  # ranks x (2 * channels + 1)
        means, variances = every[:, :channels], every[:, channels:2 * channels]
        counts = every[:, -1:].detach()
        # Tensors throughout, so that a GPU batch never waits for the host (an empty global batch
        # gives zeros rather than a division by zero).
        total = counts.sum().clamp_min(1.0)
        g_mean = (counts * means).sum(0) / total
        g_var = (counts * (variances + (means - g_mean) ** 2)).sum(0) / total
        return g_mean, g_var, total

    @classmethod
    def convert_sync_batchnorm(cls, module):
        """Returns `module` with every ``torch.nn.BatchNorm*d`` (and torch's own SyncBatchNorm)
        replaced by a dadt SyncBatchNorm that keeps its parameters and running statistics."""
        out = module
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and not isinstance(module, cls):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child))
        return out
