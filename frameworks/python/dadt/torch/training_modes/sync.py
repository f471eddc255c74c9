"""The "sync" training mode (Horovod's DistributedOptimizer): every gradient's allreduce starts
from a backward hook the moment autograd has accumulated it, and step() waits for all of them,
writes the averages into ``p.grad`` and runs the wrapped optimizer.

Options only this mode takes: backward_passes_per_step > 1 (a parameter's allreduce starts at its
last accumulated backward pass), groups (the members of a group go as one grouped allreduce once
all have their gradient), sparse gradients (allgathered as indices and values, or reduced dense
with sparse_as_dense), step(closure) and skip_synchronize(). With compression=
Compression.powersgd(...), the gradients it compresses go as PowerSGD's two allreduces, pipelined
with backward (powersgd.py); the others as plain allreduces.
"""

import os
import warnings

import torch

from dadt.common.process_sets import set_size
from dadt.common.util import Average, split_list
from dadt.torch.functions import broadcast_object
from dadt.torch.handles import poll, synchronize
from dadt.torch.async_collectives import allgather_async, allreduce_async_, grouped_allreduce_async_
from dadt.torch.compression import PowerSGD
from dadt.torch.training_modes.engine import ModeEngine, warn_dropped_pending
from dadt.torch.training_modes.powersgd import PowerSGDReducer


class SyncEngine(ModeEngine):
    """Horovod's behaviour: averaged gradients of this step, applied by this step."""

    name = "sync"

    @classmethod
    def create(cls, host, params, *, model, bucket_bytes, groups):
        return cls(host, params, groups)

    def __init__(self, host, params, groups=None):
        self._host = host
        self._allreduce_delay = {v: host.backward_passes_per_step for v in params}
        self._handles = {}        # param (or tuple of params, for a group) -> (handle, ctx)
        self._hook_handles = []
        self._requires_update = set()
        self._synchronized = False
        _check_groups(groups)
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        self._powersgd = None
        if isinstance(host.compression, PowerSGD):
            if groups is not None:
                raise ValueError("groups= reduces its members as one grouped allreduce, which "
                                 "Compression.powersgd (one P and one Q per matrix) cannot take")
            self._powersgd = PowerSGDReducer(host.compression, host, params)
        # A rank outside the optimizer's process set, or a set of one, trains alone: no hooks.
        if host.reducing_ranks() > 1:
            self._register_hooks()

    # -- the ModeEngine interface -----------------------------------------------------------------
    def step(self, closure, should_synchronize):
        if should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            if closure is None and self._handles and _overlap_step() and \
                    self._host.step_is_separable():
                self._synchronize_and_apply()
                self._synchronized = False
                return None
            self.synchronize()
        self._synchronized = False
        return self._host.base_step(closure)

    def synchronize(self):
        """Waits for every gradient allreduce and writes the averaged gradients into ``p.grad``,
        first submitting the allreduce of every gradient not submitted yet: parameters that got
        no gradient on this rank, or fewer than backward_passes_per_step backward passes."""
        self._submit_missing()
        for key, (handle, ctx) in self._handles.items():
            self._finish(key, handle, ctx)
        self._handles.clear()
        self._synchronized = True

    def _synchronize_and_apply(self):
        """step() without a closure: synchronize() and the wrapped optimizer's step, overlapped.
        The allreduces are waited for in the order they were submitted (backward's order), and the
        parameters whose averages have arrived are stepped while the later allreduces are still on
        the wire, in parts of at least APPLY_BYTES (a part also takes every allreduce that is
        already done, so that the optimizer runs a few times a step, not once per gradient).
        Only for separable optimizers (EngineHost.step_is_separable), where this gives the same
        bits as synchronize() followed by one step. If a collective fails, the parts before it
        have been stepped (an elastic run restores its last commit anyway)."""
        self._submit_missing()
        entries = list(self._handles.items())
        reduced = {id(p) for key, _ in entries for p in _params_of(key)}
        # Parameters the hooks do not cover (a param group added after the optimizer was made)
        # are stepped with the last part, as one step() would step them.
        part = [p for group in self._host.param_groups for p in group["params"]
                if id(p) not in reduced]
        part_bytes = 0
        for i, (key, (handle, ctx)) in enumerate(entries):
            self._finish(key, handle, ctx)
            params = _params_of(key)
            part.extend(params)
            part_bytes += sum(p.numel() * p.element_size() for p in params)
            last = i + 1 == len(entries)
            if last or (part_bytes >= APPLY_BYTES and not _done(entries[i + 1][1][0])):
                self._host.base_step_on(part)
                part, part_bytes = [], 0
        self._handles.clear()

    def _submit_missing(self):
        """Submits the allreduce of every gradient not submitted yet: parameters that got no
        gradient on this rank, or fewer than backward_passes_per_step backward passes."""
        submitted = set()
        for key, (handle, _) in self._handles.items():
            if isinstance(key, tuple):
                submitted.update(key)
            elif handle is not None:
                submitted.add(key)
        # Sorted by name, so every rank submits (and numbers its groups) in the same order.
        missing = sorted(self._requires_update - submitted, key=self._host.name_of)
        if self._groups is None:
            for p in missing:
                self._handles[p] = self._allreduce_grad_async(p)
        else:
            for group in dict.fromkeys(self._p_to_group[p] for p in missing):
                for gp in group:
                    self._handles.pop(gp, None)
                self._handles[group] = self._grouped_allreduce_grad_async(group)

    def _finish(self, key, handle, ctx):
        """Waits for one entry of _handles (a parameter, or a group's tuple) and writes its
        averaged gradient(s) into ``p.grad``."""
        passes = self._host.backward_passes_per_step
        if isinstance(key, tuple):
            outputs = synchronize(handle)
            for gp, output, gctx in zip(key, outputs, ctx):
                self._allreduce_delay[gp] = passes
                self._set_grad(gp, output, gctx)
            self._group_counts[key] = 0
            return
        output = handle() if callable(handle) else synchronize(handle)
        self._allreduce_delay[key] = passes
        if self._groups is not None:
            self._group_counts[self._p_to_group[key]] = 0
        self._set_grad(key, output, ctx)

    def before_zero_grad(self, set_to_none):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")

    def set_backward_passes_per_step(self, passes):
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def load_checkpoint_state(self, pending):
        warn_dropped_pending(pending, self.name)
        self._handles = {}
        self._synchronized = False
        self.set_backward_passes_per_step(self._host.backward_passes_per_step)
        self.reset()

    def reset(self):
        """PowerSGD's state is not in checkpoints: after a loaded state dict or an elastic reset,
        every rank starts it over alike (start_iter plain reductions, Q0 from the seed, no error
        feedback), so that all ranks compress the same parameters at the same step."""
        if self._powersgd is not None:
            self._powersgd.reset()

    def remove_hooks(self):
        for h in self._hook_handles:
            if hasattr(h, "remove"):
                h.remove()
        self._hook_handles = []

    # -- hooks --------------------------------------------------------------------------------------
    def _register_hooks(self):
        name_of = self._host.name_of
        p_list = [p for group in self._host.param_groups for p in group["params"]
                  if p.requires_grad]
        if self._groups is not None:
            # Every rank must form the same groups in the same order: take the first rank's.
            ps = self._host.process_set
            first = 0 if ps is None or ps.process_set_id == 0 else ps.ranks[0]
            names = broadcast_object([name_of(p) for p in p_list], root_rank=first,
                                     name="DistributedOptimizer.parameter_order", process_set=ps)
            order = {n: i for i, n in enumerate(names)}
            p_list = sorted(p_list, key=lambda p: order[name_of(p)])
            if isinstance(self._groups, list):
                listed = {id(p) for p in p_list}
                p_groups = [[p for p in group if id(p) in listed] for group in self._groups]
                grouped = {id(p) for group in p_groups for p in group}
                p_groups = [g for g in p_groups if g] + [[p] for p in p_list if id(p) not in grouped]
            else:
                p_groups = [g for g in split_list(p_list, self._groups) if g]
            for group in map(tuple, p_groups):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0

        for p in p_list:
            self._requires_update.add(p)
            hook = self._make_hook(p)
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hook_handles.append(p.register_post_accumulate_grad_hook(hook))
            else:  # torch < 2.1: hook the gradient accumulator
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hook_handles.append(grad_acc.register_hook(hook))
                self._hook_handles.append(grad_acc)  # keep the accumulator alive

    def _make_hook(self, p):
        def hook(*ignore):
            if self._powersgd is not None:
                self._powersgd.start_ready_qs()  # the earlier layers' Q's, once their P is in
            if p in self._handles and self._handles[p][0] is not None:
                if self._allreduce_delay[p] <= 0:
                    raise AssertionError(
                        "Gradients were computed more than backward_passes_per_step times "
                        "before call to step(). Increase backward_passes_per_step to accumulate "
                        "gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                if self._groups is not None:
                    group = self._p_to_group[p]
                    self._group_counts[group] += 1
                    if self._group_counts[group] == len(group):
                        self._handles[group] = self._grouped_allreduce_grad_async(group)
                        for gp in group:  # drop the placeholders of the other members
                            self._handles.pop(gp, None)
                        self._group_counts[group] = 0
                        return
                else:
                    handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    # -- collectives --------------------------------------------------------------------------------
    def _grad_name(self, p):
        return "grad." + self._host.name_of(p)

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Gradient was not computed, but we still need to submit a tensor to allreduce
            # as one of the other ranks may have computed it (due to dynamic forward functions).
            p.grad = torch.zeros_like(p)
        tensor = p.grad
        if tensor.is_sparse:
            if not self._host.sparse_as_dense:
                return self._sparse_allreduce_grad_async(p)
            tensor = tensor.to_dense()
        if self._powersgd is not None:
            finish = self._powersgd.submit(p, tensor)
            if finish is not None:
                return finish, None
        tensor_compressed, ctx = self._compress(tensor)
        op, prescale, postscale = self._host.reduction()
        handle = allreduce_async_(tensor_compressed.contiguous(), name=self._grad_name(p), op=op,
                                  prescale_factor=prescale, postscale_factor=postscale,
                                  process_set=self._host.process_set)
        return handle, ctx

    def _sparse_allreduce_grad_async(self, p):
        """Sparse gradients: allgather indices and values; the sum is their concatenation."""
        grad = p.grad.coalesce()
        name = self._grad_name(p)
        ps = self._host.process_set
        h_indices = allgather_async(grad.indices().t().contiguous(), name=name + ".indices",
                                    process_set=ps)
        h_values = allgather_async(grad.values().contiguous(), name=name + ".values",
                                   process_set=ps)

        def finish():
            indices, values = synchronize(h_indices).t(), synchronize(h_values)
            if self._host.op == Average:
                values = values / set_size(ps)
            return torch.sparse_coo_tensor(indices, values, grad.size())
        return finish, None

    def _grouped_allreduce_grad_async(self, ps):
        """Sparse gradients in a group travel dense (as with sparse_as_dense)."""
        for p in ps:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        dense = [p.grad.to_dense() if p.grad.is_sparse else p.grad for p in ps]
        compressed, ctxs = zip(*[self._compress(t) for t in dense])
        op, prescale, postscale = self._host.reduction()
        handle = grouped_allreduce_async_([t.contiguous() for t in compressed],
                                          name="grad.group." + self._host.name_of(ps[0]),
                                          op=op, prescale_factor=prescale,
                                          postscale_factor=postscale,
                                          process_set=self._host.process_set)
        return handle, ctxs

    def _compress(self, tensor):
        """The optimizer's compression; with PowerSGD, what it leaves uncompressed goes whole."""
        if self._powersgd is not None:
            return tensor, None
        return self._host.compress(tensor)

    def _set_grad(self, p, output, ctx):
        aggregated = output if self._powersgd is not None else self._host.decompress(output, ctx)
        if p.grad.is_sparse:
            if not aggregated.is_sparse:  # reduced dense: back to sparse for the update
                aggregated = aggregated.to_sparse()
            p.grad = aggregated
        else:
            p.grad.set_(aggregated)


# step() applies the optimizer to parts of at least this many bytes of parameters while the rest
# of the gradients are still being reduced (SyncEngine._synchronize_and_apply).
APPLY_BYTES = 4 * 1024 * 1024


def _overlap_step() -> bool:
    """DADT_OVERLAP_STEP=0 turns the overlapped step off (docs/running.md)."""
    return os.environ.get("DADT_OVERLAP_STEP", "1") != "0"


def _params_of(key):
    """The parameters of a _handles key: a parameter, or a group's tuple of them."""
    return key if isinstance(key, tuple) else (key,)


def _done(handle) -> bool:
    """Whether an entry's collective has completed (a sparse gradient's finishing function: not
    known, so no)."""
    return not callable(handle) and poll(handle)


def _check_groups(groups):
    if groups is None:
        return
    if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "torch.Tensor.")
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))
