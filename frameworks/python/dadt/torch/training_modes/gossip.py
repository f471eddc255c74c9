"""The "gossip" training mode: decentralized SGD with no allreduce while training.

algorithm="adpsgd" (the default): AD-PSGD (Lian et al. 2018), asynchronous, no global barrier.

    x_i <- x_i - eta * g_i(x_i)                 each step, rank i alone
    x_i <- x_i + (x_j(s) - x_i(s)) / 2          when the exchange started at step s returns

Each step ends by handing a snapshot x_i(s) of the weights to a matched exchange
(dadt.torch.exchange_async): the coordinator pairs this rank with whichever of its candidate
partners (the `graph`) asks next, the two swap snapshots in the background while both go on
training, and the step that finds the swap done adds half the difference. Both ranks of a pair
add opposite halves, so the sum of the models over the ranks is kept (every exchange is the
pairwise average (x_i + x_j) / 2 of the snapshots, with the steps taken since kept on top). A rank
never waits for another: while its exchange has no partner it trains alone, starting no new one.
flush() withdraws an exchange still without a partner and then averages the weights over every
rank once, so that training ends with one model.

algorithm="sgp": Stochastic Gradient Push with one step of overlap (Assran et al. 2019), push-sum
on the directed exponential graph, one out-neighbour per step (rank + 2^k, k = t mod log2 n):

    x_i <- x_i + (z_i' - z_i)                   the wrapped optimizer's step on z_i = x_i / w_i
    (x_i, w_i) <- (x_i, w_i) + (x_j, w_j)(t-1)  what rank j = rank - 2^k' pushed at step t - 1
    send (x_i, w_i) / 2 to rank + 2^k; keep the other half
    z_i <- x_i / w_i

The sum of the numerators and of the weights over the ranks is kept, and z_i is the de-biased
model each rank trains. A rank waits, at step t + 1, for the message pushed to it at step t: the
overlap hides one step of communication, but a slow rank slows its out-neighbours (unlike
AD-PSGD). flush() waits for the messages in flight, then averages z over every rank.
"""

import itertools
from typing import List

import torch

from dadt.common import process_sets, topology
from dadt.common.basics import rank, size
from dadt.common.util import Average, Max
from dadt.torch.async_collectives import allreduce_async, grouped_allreduce_async_
from dadt.torch.handles import poll, synchronize
from dadt.torch.p2p import exchange_async, irecv, isend, withdraw_exchange
from dadt.torch.training_modes.engine import ModeEngine

# Gives each gossip optimizer of a process its own exchange names (in creation order, the same on
# every rank, as the optimizers are).
_instances = itertools.count()

GRAPHS = tuple(topology.GRAPHS)
DEFAULT_GRAPH = "complete"
ALGORITHMS = ("adpsgd", "sgp")


class GossipEngine(ModeEngine):
    """Pairwise model averaging with a neighbour, overlapped with the next steps (AD-PSGD)."""

    name = "gossip"

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups, graph=None, algorithm=None):
        if (algorithm or "adpsgd") == "sgp":
            if graph not in (None, "exponential"):
                raise ValueError("algorithm='sgp' pushes along the directed exponential graph; "
                                 "graph=%r does not apply" % graph)
            return PushSumEngine(host, params)
        return cls(host, params, graph or DEFAULT_GRAPH)

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step: int, groups):
        if groups:
            raise ValueError("mode='gossip' sends the weights, not gradients: groups= does not "
                             "apply")

    def __init__(self, host, params: List[torch.Tensor], graph: str):
        self._host = host
        self._peers = topology.peers(graph, rank(), size())
        self.graph = graph
        self._groups = _flat_groups(host, params)
        self._pending = []  # (params, name, handle, snapshot) of the exchanges in flight
        self.exchanges = 0  # exchanges that found a partner (for progress lines and tests)

    # -- the step ----------------------------------------------------------------------------------
    def step(self, closure, should_synchronize: bool):
        loss = self._host.base_step(closure) if closure is not None else self._host.base_step()
        self._finish(block=False)
        if not self._pending and self._peers:
            self._start()
        return loss

    def synchronize(self):
        """Nothing to wait for: gradients are never averaged in this mode."""

    def flush(self):
        self._settle()
        self._average_all()

    # -- state -------------------------------------------------------------------------------------
    def checkpoint_state(self) -> dict:
        self._settle()  # the weights in the checkpoint include every exchange that found a partner
        return {}

    def reset(self):
        self._pending = []  # the exchanges of the previous world are gone with it

    # -- internals ---------------------------------------------------------------------------------
    def _start(self):
        with torch.no_grad():
            for params, name in self._groups:
                snapshot = torch.cat([p.detach().reshape(-1) for p in params])
                handle = exchange_async(snapshot, self._peers, name=name)
                self._pending.append((params, name, handle, snapshot))

    def _finish(self, block: bool):
        still = []
        for item in self._pending:
            params, _, handle, snapshot = item
            if not block and not poll(handle):
                still.append(item)
                continue
            received, partner = synchronize(handle)
            if partner >= 0:
                self.exchanges += 1
                _add_half_difference(params, received, snapshot)
        self._pending = still

    def _settle(self):
        """Withdraws the exchanges without a partner yet and applies the others."""
        for _, name, handle, _ in self._pending:
            if not poll(handle):
                withdraw_exchange(name)
        self._finish(block=True)

    def _average_all(self):
        _average_over_every_rank([p for ps, _ in self._groups for p in ps])


class PushSumEngine(ModeEngine):
    """Stochastic Gradient Push with one step of overlap (algorithm="sgp")."""

    name = "gossip"

    def __init__(self, host, params: List[torch.Tensor]):
        self._host = host
        self._groups = _flat_groups(host, params)
        # Per group: the numerator x (flat) and the push-sum weight w, last element of a message.
        self._x = [torch.cat([p.detach().reshape(-1) for p in ps]) for ps, _ in self._groups]
        self._w = [1.0 for _ in self._groups]
        self._hops = topology.exponential_graph(rank(), size())
        self._t = 0
        # (group index, send handle, receive handle, message, receive buffer, their two names)
        self._in_flight = []

    def step(self, closure, should_synchronize: bool):
        before = [torch.cat([p.detach().reshape(-1) for p in ps]) for ps, _ in self._groups]
        loss = self._host.base_step(closure) if closure is not None else self._host.base_step()
        with torch.no_grad():
            for g, (ps, _) in enumerate(self._groups):
                self._x[g].add_(torch.cat([p.detach().reshape(-1) for p in ps]).sub_(before[g]))
            self._receive()
            if self._hops[0]:
                self._push()
            self._write_models()
        self._t += 1
        return loss

    def synchronize(self):
        """Nothing to wait for: gradients are never averaged in this mode."""

    def flush(self):
        self._check_same_steps()
        with torch.no_grad():
            self._receive()
            self._write_models()
        _average_over_every_rank([p for ps, _ in self._groups for p in ps])
        for g, (ps, _) in enumerate(self._groups):
            self._x[g] = torch.cat([p.detach().reshape(-1) for p in ps])
            self._w[g] = 1.0

    def checkpoint_state(self) -> dict:
        with torch.no_grad():
            self._receive()
            self._write_models()
        return {}

    def reset(self):
        self._in_flight = []
        for g, (ps, _) in enumerate(self._groups):
            self._x[g] = torch.cat([p.detach().reshape(-1) for p in ps])
            self._w[g] = 1.0

    def _check_same_steps(self):
        """Every rank waits for its in-neighbour's last push: ranks that took different numbers of
        steps would wait forever. Then every rank withdraws what it has in flight and raises."""
        if size() == 1:
            return
        steps = synchronize(allreduce_async(torch.tensor([self._t, -self._t], dtype=torch.int64),
                                            op=Max, name="dadt.gossip.sgp.steps"))
        most, fewest = int(steps[0]), -int(steps[1])
        if most == fewest:
            return
        for _, sent, received, _, _, names in self._in_flight:
            for handle, name in zip((sent, received), names):
                if not poll(handle):
                    withdraw_exchange(name)
                synchronize(handle)
        self._in_flight = []
        raise ValueError("mode='gossip', algorithm='sgp': every rank must take the same number of "
                         "steps before flush() (a rank waits for its neighbour's last push); the "
                         "ranks took %d to %d steps (this rank %d)" % (fewest, most, self._t))

    def _push(self):
        sends, recvs = self._hops
        k = self._t % len(sends)
        dst, src = sends[k], recvs[k]
        for g, (_, name) in enumerate(self._groups):
            self._x[g].mul_(0.5)
            self._w[g] *= 0.5
            message = torch.cat([self._x[g], self._x[g].new_tensor([self._w[g]])])
            buffer = torch.empty_like(message)
            names = ("%s.%d.%d->%d" % (name, self._t, rank(), dst),
                     "%s.%d.%d->%d" % (name, self._t, src, rank()))
            sent = isend(message, dst, name=names[0])
            received = irecv(buffer, src, name=names[1])
            self._in_flight.append((g, sent, received, message, buffer, names))

    def _receive(self):
        for g, sent, received, _, buffer, _ in self._in_flight:
            synchronize(sent)
            synchronize(received)
            self._x[g].add_(buffer[:-1])
            self._w[g] += float(buffer[-1])
        self._in_flight = []

    def _write_models(self):
        for g, (ps, _) in enumerate(self._groups):
            z = self._x[g] / self._w[g]
            offset = 0
            for p in ps:
                n = p.numel()
                p.copy_(z[offset:offset + n].view_as(p))
                offset += n


def _flat_groups(host, params: List[torch.Tensor]):
    """The parameters by dtype, each group with the exchange name of its flat tensor."""
    if process_sets.set_id(host.process_set) != 0:
        raise ValueError("mode='gossip' exchanges with peers of the whole job; process_set= "
                         "is not supported")
    instance = next(_instances)
    by_dtype = {}
    for p in params:
        if not p.is_floating_point():
            raise ValueError("mode='gossip' averages weights: parameter %r is %s"
                             % (host.name_of(p), p.dtype))
        by_dtype.setdefault(p.dtype, []).append(p)
    return [(ps, "dadt.gossip.%d.%s" % (instance, str(dtype).replace("torch.", "")))
            for dtype, ps in by_dtype.items()]


def _average_over_every_rank(params: List[torch.Tensor]) -> None:
    with torch.no_grad():
        if size() > 1 and params:
            synchronize(grouped_allreduce_async_([p.data for p in params], op=Average,
                                                 name="dadt.gossip.flush"))


def _add_half_difference(params: List[torch.Tensor], received: torch.Tensor,
                         snapshot: torch.Tensor) -> None:
    """x += (x_partner(s) - x_mine(s)) / 2, parameter by parameter."""
    with torch.no_grad():
        delta = received.sub_(snapshot).mul_(0.5)
        offset = 0
        for p in params:
            n = p.numel()
            p.add_(delta[offset:offset + n].view_as(p))
            offset += n
