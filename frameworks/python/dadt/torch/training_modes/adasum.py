"""AdasumEngine: DistributedOptimizer(op=Adasum), Horovod's adaptive summation of the updates.

Each rank runs the wrapped optimizer's own step on its own gradients; what that step changed in a
parameter is then combined across ranks with Adasum (an allreduce with op=Adasum, runtime/
backends/adasum.h) and applied to the weights from before the step:

    x <- x0 + Adasum_i(InnerOpt_i(x0, g_i) - x0)

Adasum(a, b) = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b: orthogonal updates add, parallel
ones average, so the learning rate of one rank is the one to use (do not scale it by size()).
Combining the updates rather than the gradients is what Horovod does too: an optimizer with state
(momentum, Adam's moments) keeps its own, from its own gradients.
"""
from typing import List

import torch

from dadt.common.util import Adasum
from dadt.torch.async_collectives import allreduce_async_, synchronize
from dadt.torch.training_modes.engine import ModeEngine


class AdasumEngine(ModeEngine):
    """op=Adasum in mode="sync": the wrapped step first, then one Adasum allreduce per parameter
    (fused by the runtime like any other), all submitted before the first wait."""

    name = "sync"

    def __init__(self, host, params: List[torch.Tensor]):
        self._host = host
        self._params = [p for p in params if p.requires_grad]

    @classmethod
    def create(cls, host, params, *, model=None, bucket_bytes=None, groups=None):
        return cls(host, params)

    def step(self, closure, should_synchronize):
        with torch.no_grad():
            before = [p.detach().clone() for p in self._params]
        loss = self._host.base_step(closure)
        with torch.no_grad():
            pending = []
            for p, x0 in zip(self._params, before):
                delta = p.detach() - x0
                name = "adasum." + self._host.name_of(p)
                pending.append((p, x0, delta, allreduce_async_(delta, op=Adasum, name=name)))
            for p, x0, delta, handle in pending:
                synchronize(handle)
                p.copy_(x0.add_(delta))
        return loss

    def synchronize(self):
        """The gradients stay this rank's own (the updates are combined in step()): nothing to
        wait for, so `synchronize(); clip; with skip_synchronize(): step()` clips them."""

    def set_backward_passes_per_step(self, passes):
        """Accumulation is autograd's own (the gradients are this rank's): any count is fine."""
