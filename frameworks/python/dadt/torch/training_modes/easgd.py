"""The "easgd" training mode: elastic averaging SGD, its asynchronous form and EAMSGD
(dadt.common.easgd has the rule).

    x_i <- x_i - alpha (x_i - c);   c <- c + n alpha (mean_j x_j - c)     every sync_every steps

asynchronous=True: the centre's allreduce overlaps the next sync_every inner steps and lands
just before the next pull, the first to read it: the same weights as the synchronous form, with
the wait gone. EAMSGD: wrap torch.optim.SGD(momentum=..., nesterov=True).
"""

from dadt.common import periodic
from dadt.common.easgd import EASGDRule
from dadt.torch.training_modes.periodic import PeriodicEngine


class EASGDEngine(PeriodicEngine):
    """The elastic pull towards a centre every rank keeps a replica of."""

    name = "easgd"
    knobs = periodic.MODE_KNOBS["easgd"]

    def make_rule(self, ops, knobs):
        return EASGDRule(ops, knobs["moving_rate"], self._ranks)
