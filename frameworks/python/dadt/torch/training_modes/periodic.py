"""PeriodicEngine: what the torch engines of the modes that send less share (local_sgd, diloco,
easgd; docs/training-modes.md, "Modes that send less").

The maths and the schedule are framework-neutral (dadt.common.periodic and the rule of each
mode); this file is their torch side: the model cut into fragments of flat weights, TorchOps (the
collectives and copies on torch tensors, CPU or CUDA), and the step:

    step t < warmup_steps:   sync mode (every gradient averaged, SyncEngine)
    step t >= warmup_steps:  the wrapped optimizer's own step on local gradients, then the
                             exchanges that the schedule says start or finish at this step

No gradient hook is registered after warm-up: between exchanges a step sends nothing.
"""

import copy
from typing import List

import torch

from dadt.common import periodic
from dadt.common.util import Average
from dadt.torch.async_collectives import allgather_async, allreduce_async
from dadt.torch.functions import broadcast_object
from dadt.torch.handles import synchronize
from dadt.torch.training_modes.buckets import layer_order
from dadt.torch.training_modes.engine import PERIODIC_KEY, ModeEngine
from dadt.torch.training_modes.sync import SyncEngine

_CAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


class TorchOps(periodic.ArrayOps):
    """dadt.common.periodic.ArrayOps on flat torch tensors, reduced over `process_set`."""

    def __init__(self, process_set):
        self._process_set = process_set

    def clone(self, x):
        return x.detach().clone()

    def assign(self, dst, src):
        dst.copy_(src)

    def allreduce_average_async(self, x, name):
        return allreduce_async(x, name=name, op=Average, process_set=self._process_set)

    def allgather_async(self, x, name):
        return allgather_async(x, name=name, process_set=self._process_set)

    def wait(self, handle):
        return synchronize(handle)

    def cast(self, x, compression):
        return x.to(_CAST[compression])

    def uncast(self, y, like):
        return y.to(like.dtype)

    def quantize_int8(self, x):
        # One scale per fragment: the largest magnitude maps to 127 (symmetric, round to nearest).
        scale = (x.detach().abs().max().float() / 127.0).clamp_min(torch.finfo(torch.float32).tiny)
        q = torch.round(x.float() / scale).clamp_(-127, 127).to(torch.int8)
        header = scale.reshape(1).to(torch.float32).cpu().view(torch.int8).to(x.device)
        return torch.cat([header, q]), (q.float() * scale).to(x.dtype)

    def dequantize_int8_mean(self, gathered, ranks, like):
        rows = gathered.view(ranks, -1)
        scales = rows[:, :4].cpu().contiguous().view(torch.float32).to(rows.device)  # (ranks, 1)
        return (rows[:, 4:].float() * scales).mean(dim=0).to(like.dtype)


class TorchOuter:
    """DiLoCo's outer optimizer as the rule sees it (step(f, theta, delta), state, load_state),
    over a torch optimizer built on the model's parameters: for one fragment, the parameters
    take theta and their .grad the averaged pseudo-gradient, the optimizer steps those parameters
    only (its param_groups narrowed for the call), and theta takes the result. The parameters'
    own values and gradients are put back afterwards."""

    def __init__(self, optimizer: torch.optim.Optimizer, fragments: List[List[torch.Tensor]]):
        self.optimizer, self._fragments = optimizer, fragments

    @torch.no_grad()
    def step(self, f, theta, delta):
        params = self._fragments[f]
        saved = [(p.detach().clone(), p.grad) for p in params]
        for p, t, d in zip(params, _views(theta, params), _views(delta, params)):
            p.copy_(t)
            p.grad = d.to(p.dtype).clone()
        members = {id(p) for p in params}
        full = [g["params"] for g in self.optimizer.param_groups]
        try:
            for g, ps in zip(self.optimizer.param_groups, full):
                g["params"] = [p for p in ps if id(p) in members]
            self.optimizer.step()
        finally:
            for g, ps in zip(self.optimizer.param_groups, full):
                g["params"] = ps
        theta.copy_(_flat(params, theta.dtype))
        for p, (value, grad) in zip(params, saved):
            p.copy_(value)
            p.grad = grad

    def state(self):
        return copy.deepcopy(self.optimizer.state_dict())

    def load_state(self, state):
        if state:
            self.optimizer.load_state_dict(state)


class PeriodicEngine(ModeEngine):
    """The torch engine of a mode that sends less. Subclasses name the mode, its knobs (the
    DistributedOptimizer keywords it takes, dadt.common.periodic.KNOBS) and make its Rule."""

    knobs = ()  # the DistributedOptimizer keywords the mode takes: periodic.MODE_KNOBS[name]

    @classmethod
    def check_options(cls, *, model, backward_passes_per_step, groups):
        if groups is not None:
            raise ValueError("groups is a mode='sync' option; mode=%r averages the model every "
                             "sync_every steps" % cls.name)

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups, knobs=None, compression="none"):
        if bucket_bytes is not None:
            raise ValueError("bucket_bytes is an option of mode='async' and mode='dear'; "
                             "mode=%r exchanges the model in `fragments` parts" % cls.name)
        periodic.check_compression(compression, cls.name)
        knobs = periodic.check_knobs(cls.name, dict(knobs or {}), cls.knobs,
                                     max(host.reducing_ranks(), 1))
        return cls(host, layer_order(params, model), knobs, compression)

    def __init__(self, host, params: List[torch.Tensor], knobs: dict, compression: str = "none"):
        self._host = host
        self.knobs = knobs
        self.compression = compression
        runs = periodic.split_by_bytes([p.numel() * p.element_size() for p in params],
                                       knobs.get("fragments", 1), self.name)
        self.fragments = [[params[i] for i in run] for run in runs]
        self._ops = TorchOps(host.process_set)
        self._warmup_left = knobs.get("warmup_steps", 0)
        # Warm-up is sync mode; its hooks go once it is over.
        self._sync = SyncEngine(host, params) if self._warmup_left > 0 else None
        # Collectives are named after the mode and the model's first parameter, so that two
        # optimizers (a GAN's, say) never share a name, and every rank agrees on it.
        name = "dadt.%s.%s" % (self.name, host.name_of(params[0]))
        self.exchanger = periodic.Exchanger(self.make_rule(self._ops, knobs), self._ops,
                                            periodic.schedule_for(self.name, knobs), name=name,
                                            compression=compression, ranks=self._ranks)

    # -- what a mode defines ---------------------------------------------------------------------
    def make_rule(self, ops, knobs) -> periodic.Rule:
        raise NotImplementedError

    # -- the ModeEngine interface ----------------------------------------------------------------
    def step(self, closure, should_synchronize):
        if self._sync is not None:
            result = self._sync.step(closure, should_synchronize)
            self._warmup_left -= 1
            if self._warmup_left <= 0:
                self._warmup_over()
            return result
        self.exchanger.before_step(self._read)
        result = self._inner_step(closure, should_synchronize)
        self.exchanger.after_step(self._read, self._write)
        return result

    def _warmup_over(self):
        self._sync.remove_hooks()
        self._sync = None

    def _inner_step(self, closure, should_synchronize):
        """One step between exchanges: the wrapped optimizer on this rank's own gradients."""
        return self._host.base_step(closure)

    def synchronize(self):
        """Waits for the gradient allreduces during warm-up; afterwards gradients are not averaged
        and there is nothing to wait for (flush() exchanges the model)."""
        if self._sync is not None:
            self._sync.synchronize()

    def flush(self):
        self.exchanger.flush(self._read, self._write)

    def set_backward_passes_per_step(self, passes):
        if self._sync is not None:
            self._sync.set_backward_passes_per_step(passes)

    def checkpoint_state(self):
        return {PERIODIC_KEY: {"mode": self.name, "warmup_left": self._warmup_left,
                               "exchanger": self.exchanger.state()}}

    def load_mode_state(self, state):
        if state is None:
            self.exchanger.load_state(None)
            return
        if state.get("mode") != self.name:
            raise ValueError("the checkpoint holds the state of mode=%r; this optimizer is "
                             "mode=%r" % (state.get("mode"), self.name))
        if state["warmup_left"] <= 0 and self._sync is not None:
            self._warmup_over()
        self._warmup_left = state["warmup_left"]
        self.exchanger.load_state(state["exchanger"])

    def broadcast_state(self, root_rank):
        """Root rank's exchange state (the last synced weights, the centre, the outer optimizer's
        state, the step count) becomes every rank's."""
        from dadt.common.basics import rank
        mine = self.checkpoint_state()[PERIODIC_KEY] if rank() == root_rank else None
        theirs = broadcast_object(mine, root_rank, name="DistributedOptimizer.%s_state" % self.name)
        if rank() != root_rank:
            self.load_mode_state(theirs)

    def reset(self):
        """After an elastic reset: the collectives in flight are dropped and the weights roll back
        to the last synced ones (the steps since are redone, as torchft does)."""
        self.exchanger.reset(self._read, self._write)

    def remove_hooks(self):
        if self._sync is not None:
            self._sync.remove_hooks()

    # -- fragments ---------------------------------------------------------------------------------
    def _ranks(self) -> int:
        return max(self._host.reducing_ranks(), 1)

    def _read(self, f):
        params = self.fragments[f]
        return _flat(params, params[0].dtype)

    @torch.no_grad()
    def _write(self, f, flat):
        params = self.fragments[f]
        for p, v in zip(params, _views(flat, params)):
            p.copy_(v)


def _flat(params, dtype):
    return torch.cat([p.detach().reshape(-1).to(dtype) for p in params])


def _views(flat, params):
    out, at = [], 0
    for p in params:
        n = p.numel()
        out.append(flat[at:at + n].view(p.shape))
        at += n
    return out
