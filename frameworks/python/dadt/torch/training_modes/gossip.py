"""The "gossip" training mode: AD-PSGD (Lian et al. 2018), asynchronous decentralized SGD with no
allreduce and no global barrier.

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
"""

import itertools
from typing import List

import torch

from dadt.common import process_sets, topology
from dadt.common.basics import rank, size
from dadt.common.util import Average
from dadt.torch.async_collectives import grouped_allreduce_async_
from dadt.torch.handles import poll, synchronize
from dadt.torch.p2p import exchange_async, withdraw_exchange
from dadt.torch.training_modes.engine import ModeEngine

# Gives each gossip optimizer of a process its own exchange names (in creation order, the same on
# every rank, as the optimizers are).
_instances = itertools.count()

GRAPHS = tuple(topology.GRAPHS)
DEFAULT_GRAPH = "complete"


class GossipEngine(ModeEngine):
    """Pairwise model averaging with a neighbour, overlapped with the next steps (AD-PSGD)."""

    name = "gossip"

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups, graph=None):
        return cls(host, params, graph or DEFAULT_GRAPH)

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step: int, groups):
        if groups:
            raise ValueError("mode='gossip' sends the weights, not gradients: groups= does not "
                             "apply")

    def __init__(self, host, params: List[torch.Tensor], graph: str):
        if process_sets.set_id(host.process_set) != 0:
            raise ValueError("mode='gossip' exchanges with peers of the whole job; process_set= "
                             "is not supported")
        self._host = host
        self._peers = topology.peers(graph, rank(), size())
        self.graph = graph
        instance = next(_instances)
        # One exchange per dtype: the weights of each dtype travel as one flat tensor.
        by_dtype = {}
        for p in params:
            if not p.is_floating_point():
                raise ValueError("mode='gossip' averages weights: parameter %r is %s"
                                 % (host.name_of(p), p.dtype))
            by_dtype.setdefault(p.dtype, []).append(p)
        self._groups = [(ps, "dadt.gossip.%d.%s" % (instance, str(dtype).replace("torch.", "")))
                        for dtype, ps in by_dtype.items()]
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
        with torch.no_grad():
            params = [p for ps, _ in self._groups for p in ps]
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
