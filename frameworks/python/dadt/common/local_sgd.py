"""Local SGD (post-local SGD; DOWNPOUR's decentralized form) and its streaming form: the rule of
mode="local_sgd".

Each rank takes H = sync_every steps of its own optimizer, then the ranks average their weights:

    x_i <- x_i - eta * g_i(x_i)                 every step, on rank i alone
    x_i <- (1/n) * sum_j x_j                    every H steps (per fragment, on its schedule)

after ``warmup_steps`` of synchronous training (Lin et al. 2020, "Don't use large mini-batches,
use local SGD"; torch's PostLocalSGDOptimizer + PeriodicModelAverager; DOWNPOUR in the
distributed-TF guide pushes every n steps to a parameter server, which this replaces by an
allreduce). Sends the weights, 1x the model, every H steps; staleness: none at an average, the
ranks' models drift apart for H steps in between. Optimizer state (momentum, Adam's moments) stays
local, as in torch's and torchft's local SGD.

Streaming (``fragment_sync_delay`` = d > 0): the average of the weights x_i(s) a fragment had when
its exchange started lands d steps later, while each rank went on training; the rank keeps what
it learnt in those d steps on top of the average (CoCoD-SGD, Shen et al. 2019, "computation and
communication decoupled"; Overlap Local-SGD, Wang et al. 2020):

    x_i <- (1/n) * sum_j x_j(s) + (x_i(s + d) - x_i(s))

so the allreduce overlaps d inner steps and no step is thrown away. Compressed (fp16, bf16 or
int8): what travels is the difference from the last average, x_i - x_sync, small and centred,
rounded with error feedback (dadt.common.periodic.Exchanger), and x_sync + its average is the new
average on every rank. Memory: the last average (1x the fragment), the weights at the start of an
exchange in flight when d > 0 (1x), the error feedback when compressed (1x).
"""

from dadt.common.periodic import Rule


class LocalSGDRule(Rule):
    """x_f <- average of x_f over the ranks (plus the steps taken while it travelled, when
    ``delay`` > 0). Keeps the last average, to which an elastic reset rolls back (the steps since
    are lost, as torchft's LocalSGD discards them). ``compressed``: the ranks send x_f minus the
    last average instead of x_f."""

    kept_name = "synced"

    def __init__(self, ops, delay: int = 0, compressed: bool = False):
        super().__init__(ops)
        self.delay, self.compressed = int(delay), bool(compressed)
        # Every rank takes the average at a landing unless it adds its own steps since the start.
        self.settled_by_land = self.delay == 0
        self.started = {}  # fragment -> its weights when its exchange started (delay > 0)

    def send(self, f, x):
        if self.delay:
            self.started[f] = self.ops.clone(x)
        return (x - self.kept[f] if self.compressed else self.ops.clone(x)), None

    def _synced(self, f, average):
        """The new average of fragment f (the same on every rank), kept."""
        synced = self.kept[f] + average if self.compressed else average
        self.ops.assign(self.kept[f], synced)
        return synced

    def land(self, f, x, average):
        synced = self._synced(f, average)
        start = self.started.pop(f, None)
        return synced if start is None else synced + (x - start)

    def final(self, f, x, average):
        self.started.pop(f, None)
        return self._synced(f, average)  # every rank ends on the average

    def reset(self, f, x):
        self.started.pop(f, None)
        return super().reset(f, x)

    def state(self):
        return dict(super().state(), started={f: self.ops.clone(x) for f, x in self.started.items()})

    def load_state(self, state):
        super().load_state(state)
        self.started = {int(f): x for f, x in state.get("started", {}).items()}
