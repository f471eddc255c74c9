"""DiLoCo and Streaming DiLoCo: the rule of mode="diloco".

Each rank takes H = sync_every inner steps with the wrapped (inner) optimizer from the weights
of the last synchronization, theta; then the ranks average their pseudo-gradients and an outer
optimizer (default SGD, Nesterov, lr 0.7, momentum 0.9) applies the average to theta:

    x_i <- InnerOpt(x_i, g_i(x_i))             H times, on rank i alone, from x_i = theta
    delta = (1/n) * sum_i (theta - x_i)         the averaged pseudo-gradient (one allreduce)
    theta <- OuterOpt(theta, delta)             the same on every rank
    x_i <- (1 - a) * theta + a * x_i            a = fragment_update_alpha (default 0: x_i = theta)

(Douillard et al. 2023, "DiLoCo: Distributed Low-Communication Training of Language Models".)
Streaming DiLoCo (Douillard et al. 2025) runs this per fragment of the model on a staggered
schedule: fragment f's pseudo-gradient is computed and its allreduce started
``fragment_sync_delay`` = d steps before the outer update is applied, so the allreduce overlaps d
inner steps, and with F fragments only 1/F of the model is on the wire at a time. The
pseudo-gradient may travel as fp16, bf16 or int8; the part rounding lost is added to the next
pseudo-gradient of that fragment (error feedback), so nothing is lost for good.

Sends 1x the model (0.5x as fp16/bf16, 0.25x as int8 through an allgather) every H steps.
Memory: theta and the outer optimizer's state (1x the model each with momentum), the error
feedback (1x) when compressed. AGN (accumulated gradient normalization, in the distributed-TF
guide) is this rule with outer SGD, lr = n / H, no momentum (docs/training-modes.md).
"""

from typing import Any, Dict, Optional

from dadt.common.periodic import Rule


class NesterovOuter:
    """The outer optimizer of the paper, for front ends whose optimizers are not objects over the
    weights (JAX, Keras): SGD with lr, momentum and Nesterov, in torch.optim.SGD's form:
    m <- mu * m + delta; theta <- theta - lr * (delta + mu * m) (without Nesterov: - lr * m)."""

    def __init__(self, ops, lr: float = 0.7, momentum: float = 0.9, nesterov: bool = True):
        if lr <= 0 or momentum < 0:
            raise ValueError("the outer optimizer needs lr > 0 and momentum >= 0, got lr=%r, "
                             "momentum=%r" % (lr, momentum))
        self.ops, self.lr, self.momentum, self.nesterov = ops, lr, momentum, nesterov
        self.buffers: Dict[int, Any] = {}

    def step(self, f: int, theta, delta) -> None:
        """theta <- the outer update of theta by delta, in place."""
        if self.momentum:
            m = self.buffers.get(f)
            if m is None:
                m = self.buffers[f] = self.ops.clone(delta)
            else:
                self.ops.assign(m, m * self.momentum + delta)
            delta = delta + m * self.momentum if self.nesterov else m
        self.ops.assign(theta, theta - delta * self.lr)

    def state(self):
        return {f: self.ops.clone(m) for f, m in self.buffers.items()}

    def load_state(self, state):
        self.buffers = {int(f): m for f, m in (state or {}).items()}


class DiLoCoRule(Rule):
    """theta_f (``kept``) and the outer update of one fragment at a time. ``outer`` has step(f,
    theta, delta) (in place), state() and load_state(state): NesterovOuter, or a front end's
    wrapper of its own optimizer (dadt.torch wraps any torch.optim.Optimizer)."""

    kept_name = "theta"

    def __init__(self, ops, outer, alpha: float = 0.0):
        super().__init__(ops)
        self.outer, self.alpha = outer, float(alpha)
        self.settled_by_land = self.alpha == 0.0  # every rank takes theta

    def send(self, f, x):
        return self.kept[f] - x, None

    def land(self, f, x, average, alpha: Optional[float] = None):
        theta = self.kept[f]
        self.outer.step(f, theta, average)
        a = self.alpha if alpha is None else alpha
        return theta if a == 0.0 else theta * (1.0 - a) + x * a

    def final(self, f, x, average):
        return self.land(f, x, average, alpha=0.0)  # every rank ends on theta

    def state(self):
        return dict(super().state(), outer=self.outer.state())

    def load_state(self, state):
        super().load_state(state)
        self.outer.load_state(state.get("outer"))
