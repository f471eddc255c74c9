"""The "diloco" training mode: DiLoCo and Streaming DiLoCo (dadt.common.diloco has the rule).

    x_i <- InnerOpt(x_i, g_i(x_i))           sync_every times, from x_i = theta
    theta <- OuterOpt(theta, mean_i(theta - x_i));  x_i <- (1 - a) theta + a x_i

per fragment, on the staggered schedule of dadt.common.periodic, the allreduce of the
pseudo-gradient overlapping fragment_sync_delay inner steps. The outer optimizer is any torch
optimizer built on the model's parameters (default SGD, lr 0.7, momentum 0.9, Nesterov, as in the
paper); it is stepped one fragment at a time.
"""

import torch

from dadt.common import periodic
from dadt.common.diloco import DiLoCoRule
from dadt.torch.training_modes.periodic import PeriodicEngine, TorchOuter


class DiLoCoEngine(PeriodicEngine):
    """H inner steps, then the outer optimizer on the averaged pseudo-gradient."""

    name = "diloco"
    knobs = periodic.MODE_KNOBS["diloco"]

    def make_rule(self, ops, knobs):
        params = [p for fragment in self.fragments for p in fragment]
        outer = knobs.get("outer_optimizer")
        if outer is None:
            outer = torch.optim.SGD(params, lr=0.7, momentum=0.9, nesterov=True)
        elif callable(outer) and not isinstance(outer, torch.optim.Optimizer):
            outer = outer(params)
        if not isinstance(outer, torch.optim.Optimizer):
            raise ValueError("outer_optimizer must be a torch.optim.Optimizer over the model's "
                             "parameters (or a function of the parameters that makes one), got %s"
                             % type(outer).__name__)
        if getattr(outer, "_dadt_distributed", False):
            raise ValueError("outer_optimizer must be a plain torch optimizer, not a "
                             "DistributedOptimizer: the pseudo-gradient it steps is averaged "
                             "already")
        theirs = {id(p) for g in outer.param_groups for p in g["params"]}
        mine = {id(p) for p in params}
        if theirs != mine:
            raise ValueError("outer_optimizer must be built on the same parameters as the wrapped "
                             "optimizer (%d parameters), got %d of which %d are the wrapped "
                             "optimizer's" % (len(mine), len(theirs), len(theirs & mine)))
        self.outer_optimizer = outer
        return DiLoCoRule(ops, TorchOuter(outer, self.fragments),
                          alpha=knobs.get("fragment_update_alpha", 0.0))
