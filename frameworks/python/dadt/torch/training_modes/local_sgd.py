"""The "local_sgd" training mode: post-local SGD (dadt.common.local_sgd has the rule).

    x_i <- x_i - eta * g_i(x_i)          each step, rank i alone (after warmup_steps of sync mode)
    x_i <- (1/n) sum_j x_j               every sync_every steps, per fragment

Sends the weights (1x the model) every sync_every steps and nothing in between.
"""

from dadt.common.local_sgd import LocalSGDRule
from dadt.torch.training_modes.periodic import PeriodicEngine


class LocalSGDEngine(PeriodicEngine):
    """Averages the weights every sync_every steps (torch's PostLocalSGDOptimizer with a
    PeriodicModelAverager, torchft's LocalSGD)."""

    name = "local_sgd"
    knobs = ("sync_every", "warmup_steps", "fragments")

    def make_rule(self, ops, knobs):
        return LocalSGDRule(ops)
