"""Local SGD (post-local SGD; DOWNPOUR's decentralized form): the rule of mode="local_sgd".

Each rank takes H = sync_every steps of its own optimizer, then the ranks average their weights:

    x_i <- x_i - eta * g_i(x_i)                 every step, on rank i alone
    x_i <- (1/n) * sum_j x_j                    every H steps (per fragment, on its schedule)

after ``warmup_steps`` of synchronous training (Lin et al. 2020, "Don't use large mini-batches,
use local SGD"; torch's PostLocalSGDOptimizer + PeriodicModelAverager; DOWNPOUR in the
distributed-TF guide pushes every n steps to a parameter server, which this replaces by an
allreduce). Sends the weights, 1x the model, every H steps; staleness: none at an average, the
ranks' models drift apart for H steps in between. Optimizer state (momentum, Adam's moments) stays
local, as in torch's and torchft's local SGD.
"""

from dadt.common.periodic import Rule


class LocalSGDRule(Rule):
    """x_f <- average of x_f over the ranks. Keeps the last averaged weights, to which an elastic
    reset rolls back (the steps since are lost, as torchft's LocalSGD discards them)."""

    kept_name = "synced"
    settled_by_land = True  # every rank takes the average

    def send(self, f, x):
        return self.ops.clone(x), None

    def land(self, f, x, average):
        self.ops.assign(self.kept[f], average)
        return average
