"""Elastic averaging SGD (EASGD, its asynchronous form and EAMSGD): the rule of mode="easgd".

Every rank keeps its own weights x_i and a replica of the centre variable c (the same on every
rank: it changes only by allreduce results). Every tau = sync_every steps, with moving rate
alpha and beta = n * alpha (Zhang, Choromanska, LeCun 2015, "Deep learning with Elastic Averaging
SGD", the synchronous form of its eq. 5-6):

    x_i <- x_i - alpha * (x_i - c)              the elastic pull, on rank i alone
    c   <- c + beta * (mean_j x_j - c)          = c + alpha * sum_j (x_j - c), one allreduce

both from the values before the exchange. Asynchronous (``asynchronous=True``, the distributed-TF
guide's AEASGD): the allreduce of round k runs during the next tau inner steps and the centre is
updated at round k+1, just before its pull. The synchronous form first reads that centre at the
same pull, so the two compute the same weights to the bit; the asynchronous one only stops
waiting: no rank waits for the network unless an allreduce takes longer than tau steps. EAMSGD is this rule
with the wrapped optimizer SGD(momentum=delta, nesterov=True), the paper's Algorithm 2 in
torch's form. Sends 1x the model every tau steps; memory: the centre (1x the model).
"""

from typing import Callable

from dadt.common.periodic import Rule


class EASGDRule(Rule):
    """The pull at an exchange's start, the centre's update at its finish. ``kept`` holds the
    centre, to which an elastic reset rolls back."""

    kept_name = "center"

    def __init__(self, ops, moving_rate: float, ranks: Callable[[], int]):
        super().__init__(ops)
        self.alpha = float(moving_rate)
        self._ranks = ranks

    def send(self, f, x):
        return self.ops.clone(x), x - (x - self.kept[f]) * self.alpha

    def land(self, f, x, average):
        c = self.kept[f]
        beta = self.alpha * self._ranks()
        self.ops.assign(c, c + (average - c) * beta)
        return None

    def final(self, f, x, average):
        """flush(): centre and every rank take the ranks' average (what the last exchange sent,
        before its pull), so the weights that end training are equal everywhere and lose no
        rank's last steps."""
        self.ops.assign(self.kept[f], average)
        return average
