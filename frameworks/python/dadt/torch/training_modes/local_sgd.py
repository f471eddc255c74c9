"""The "local_sgd" training mode: post-local SGD (dadt.common.local_sgd has the rule).

    x_i <- x_i - eta * g_i(x_i)          each step, rank i alone (after warmup_steps of sync mode)
    x_i <- (1/n) sum_j x_j               every sync_every steps, per fragment

Sends the weights (1x the model) every sync_every steps and nothing in between. Streaming
(fragment_sync_delay = d > 0): a fragment's average lands d steps after it was started, and each
rank adds the steps it took meanwhile; compressed (fp16, bf16, int8), the weights' change since
the last average travels instead of the weights.

hierarchical=True (torch's HierarchicalModelAverager with a host level every step): the ranks
of one host average their gradients every step (sync mode within the host, over shared memory),
so they hold the same weights, and the weights are averaged across hosts every sync_every steps.
Only the periodic exchange crosses the slow links.
"""

import os
import socket

from dadt.common import periodic, process_sets
from dadt.common.basics import rank, size
from dadt.common.local_sgd import LocalSGDRule
from dadt.torch.functions import allgather_object
from dadt.torch.training_modes.periodic import PeriodicEngine
from dadt.torch.training_modes.sync import SyncEngine


class LocalSGDEngine(PeriodicEngine):
    """Averages the weights every sync_every steps (torch's PostLocalSGDOptimizer with a
    PeriodicModelAverager, torchft's LocalSGD); with hierarchical=True, sync mode within each host
    in between."""

    name = "local_sgd"
    knobs = periodic.MODE_KNOBS["local_sgd"] + ("hierarchical",)

    def __init__(self, host, params, knobs, compression="none"):
        super().__init__(host, params, knobs, compression)
        self._params = params
        self._host_set = None
        self._host_sync = None
        if knobs.get("hierarchical"):
            if host.process_set is not None and process_sets.set_id(host.process_set) != 0:
                raise ValueError("hierarchical=True makes its own process sets (one per host); "
                                 "it does not take process_set=")
            self._host_set = _host_process_set()
            if self._sync is None:
                self._start_host_sync()

    def make_rule(self, ops, knobs):
        return LocalSGDRule(ops, delay=knobs.get("fragment_sync_delay", 0),
                            compressed=self.compression != "none")

    def _start_host_sync(self):
        if self._host_set is not None:
            self._host_sync = SyncEngine(_ScopedHost(self._host, self._host_set), self._params)

    def _warmup_over(self):
        super()._warmup_over()
        self._start_host_sync()

    def _inner_step(self, closure, should_synchronize):
        if self._host_sync is not None:
            return self._host_sync.step(closure, should_synchronize)
        return super()._inner_step(closure, should_synchronize)

    def synchronize(self):
        super().synchronize()
        if self._host_sync is not None:
            self._host_sync.synchronize()

    def remove_hooks(self):
        super().remove_hooks()
        if self._host_sync is not None:
            self._host_sync.remove_hooks()


class _ScopedHost:
    """The optimizer's EngineHost with another process set: the host-level sync engine's."""

    def __init__(self, host, process_set):
        self._inner, self.process_set = host, process_set

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def reducing_ranks(self):
        return process_sets.set_size(self.process_set)

    def reduction(self):
        op, prescale, postscale = self._inner.reduction()
        if prescale != 1.0 or postscale != 1.0:  # the predivide split over this set's size
            postscale = postscale * process_sets.set_size(self._inner.process_set) / \
                process_sets.set_size(self.process_set)
        return op, prescale, postscale


def _host_process_set():
    """The process set of this rank's host (ranks grouped by DADT_HOSTNAME, else the hostname);
    every rank registers every host's set, in the same order. A host of every rank is the global
    set; a set already registered is reused."""
    me = os.environ.get("DADT_HOSTNAME") or socket.gethostname()
    hosts = allgather_object(me, name="dadt.local_sgd.hosts")
    groups = {}
    for r, h in enumerate(hosts):
        groups.setdefault(h, []).append(r)
    mine = None
    for h in sorted(groups, key=lambda k: groups[k][0]):
        ranks = groups[h]
        if len(ranks) == size():
            ps = process_sets.global_process_set
        else:
            ps = _registered_or_added(ranks)
        if rank() in ranks:
            mine = ps
    return mine


def _registered_or_added(ranks):
    for sets in process_sets._registered.values():
        for ps in sets:
            if ps.ranks is not None and list(ps.ranks) == list(ranks):
                return ps
    return process_sets.add_process_set(list(ranks))
