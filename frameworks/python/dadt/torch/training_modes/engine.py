"""ModeEngine: the interface through which DistributedOptimizer runs its training mode.

DistributedOptimizer(mode=...) makes one engine (sync.py, async_mode.py, dear.py) and delegates
every mode-dependent decision to it; the optimizer itself never tests the mode. An engine talks to
the optimizer only through an EngineHost (host.py).

    engine = ENGINES[mode].create(host, params, model=model, bucket_bytes=None, groups=None)
    loss.backward()                   # the engine's gradient hooks start the collectives
    engine.step(closure=None, should_synchronize=True)
"""

import warnings
from typing import List, Optional

import torch

# optimizer.state_dict() key of async mode's pending average.
PENDING_KEY = "dadt_async_pending"
# optimizer.state_dict() key of the state of the modes that send less (local_sgd, diloco, easgd):
# the last synced weights, the centre, the outer optimizer, the step count.
PERIODIC_KEY = "dadt_periodic"


class ModeEngine:
    """How one DistributedOptimizer exchanges gradients and applies updates.

    Role: registers the gradient hooks that start the collectives as backward produces gradients,
    and decides when and how the averaged gradients reach the wrapped optimizer. Lifetime: the
    optimizer's; hooks are registered by the constructor and taken away by remove_hooks().
    Threading: the gradient hooks run on autograd's thread(s), every other method on the training
    thread, never two at once (as the optimizer's own methods).

    The methods below are the whole contract with the optimizer; each default is the answer of a
    mode that has nothing to do there.
    """

    name = ""

    @classmethod
    def create(cls, host, params: List[torch.Tensor], *, model: Optional[torch.nn.Module],
               bucket_bytes: Optional[int], groups) -> "ModeEngine":
        """The engine for `params` (the optimizer's parameters, in its order); the options the
        mode does not use are None (DistributedOptimizer has refused the ones it does not
        take)."""
        raise NotImplementedError

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step: int, groups):
        """Refuses (ValueError) the DistributedOptimizer options this mode cannot take; called
        before the optimizer is built."""

    def step(self, closure, should_synchronize: bool):
        """optimizer.step(closure). should_synchronize is False inside skip_synchronize()."""
        raise NotImplementedError

    def synchronize(self):
        """optimizer.synchronize()."""
        raise NotImplementedError

    def flush(self):
        """optimizer.flush(): completes every update that step() has scheduled."""

    def before_zero_grad(self, set_to_none: bool):
        """Called by optimizer.zero_grad() before it zeroes the gradients."""

    def set_backward_passes_per_step(self, passes: int):
        """Checks and takes a new backward_passes_per_step (the optimizer then stores it)."""
        if passes != 1:
            raise ValueError("backward_passes_per_step must be 1 in mode=%r" % self.name)

    def checkpoint_state(self) -> dict:
        """Entries that optimizer.state_dict() adds to the wrapped optimizer's state. Called
        before that state is read, so an engine may first complete updates it holds back."""
        return {}

    def load_checkpoint_state(self, pending):
        """optimizer.load_state_dict(): `pending` is the state dict's PENDING_KEY entry (None when
        absent). Called before the wrapped optimizer loads its state."""
        warn_dropped_pending(pending, self.name)

    def load_mode_state(self, state):
        """optimizer.load_state_dict(): `state` is the state dict's PERIODIC_KEY entry (None when
        absent), which only the modes that send less keep."""
        if state:
            warnings.warn("the state dict holds the exchange state of a mode=%r optimizer; "
                          "mode=%r drops it" % (state.get("mode"), self.name))

    def reset(self):
        """After an elastic reset (the new world is up, before the state is synced)."""

    def broadcast_state(self, root_rank: int):
        """broadcast_optimizer_state(): makes what the engine holds back equal to root_rank's."""

    def remove_hooks(self):
        """Removes every hook the engine registered."""


def warn_dropped_pending(pending, mode: str):
    """A state dict of an async optimizer holds averaged gradients that `mode` cannot apply."""
    if pending and pending.get("buckets"):
        warnings.warn("the state dict holds the pending averaged gradients of an async-mode "
                      "optimizer; mode=%r drops them" % mode)
