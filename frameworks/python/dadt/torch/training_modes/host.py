"""EngineHost: everything a training-mode engine may ask of the DistributedOptimizer that owns it.

An engine (sync, async, dear) never holds the optimizer itself, only this object, so the contract
between the two is this file: what an engine reads (the parameter names, the param_groups, the
reduction and its scaling, the accumulation count) and what it may do (compress, decompress, run
the wrapped optimizer's own step). The optimizer, in turn, only calls the methods of ModeEngine
(engine.py). Both are as narrow as torch DDP's communication hooks' `(state, bucket) -> Future`.

    host = EngineHost(opt, names={p: "fc.weight"}, compression=Compression.none,
                      base_step=lambda *args: torch.optim.SGD.step(opt, *args))
    host.reduction()          # (Average, 1.0, 1.0), or (Sum, 1/f, f/size) with a predivide factor
    host.base_step()          # the wrapped optimizer's update, bypassing dadt's step()
"""

from typing import Callable, Dict, List, Tuple

import torch
import torch.optim.optimizer as _torch_optimizer

from dadt.common.process_sets import keeps_own_gradients, set_size
from dadt.common.util import Average, Sum


class EngineHost:
    """The optimizer as its engine sees it. Made once by DistributedOptimizer, for its lifetime.

    Values are read from the optimizer at each call, so a change to its public attributes
    (``op``, ``gradient_predivide_factor``, ``backward_passes_per_step``, ``sparse_as_dense``) is
    seen by the engine at once, as it was when the engines were part of the optimizer. The
    engine may change nothing through it except, during one ``base_step()`` call, the ``"params"``
    list of each of ``param_groups`` (to update a subset of the parameters), which it restores.

    Threading: called from the training thread and from autograd's gradient hooks, as the
    optimizer itself is; it keeps no state of its own beyond what it is given.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, names: Dict[torch.Tensor, str],
                 compression, base_step: Callable, process_set=None):
        self._optimizer = optimizer
        self._process_set = process_set
        self._names = names
        self._compression = compression
        self._base_step = base_step

    # -- reading ---------------------------------------------------------------------------------
    def name_of(self, p: torch.Tensor) -> str:
        """The parameter's unique name (``model.named_parameters()``'s), the same on every rank:
        it names the parameter's collectives and the errors that concern it."""
        return self._names[p]

    @property
    def param_groups(self) -> List[dict]:
        """The wrapped optimizer's param_groups (the live list, not a copy)."""
        return self._optimizer.param_groups

    @property
    def process_set(self):
        """The process set whose ranks average the gradients (None: every rank). Only the sync
        mode takes another than the global set (DistributedOptimizer refuses the others)."""
        return self._process_set

    def reducing_ranks(self) -> int:
        """How many ranks reduce the gradients: the process set's size (0 when this rank is not
        a member: it then trains alone, as Horovod's non-members do)."""
        if keeps_own_gradients(self._process_set):
            return 0
        return set_size(self._process_set)

    @property
    def op(self):
        """The reduction of the gradients across ranks: Average or Sum."""
        return self._optimizer.op

    @property
    def backward_passes_per_step(self) -> int:
        return self._optimizer.backward_passes_per_step

    @property
    def sparse_as_dense(self) -> bool:
        return self._optimizer.sparse_as_dense

    def reduction(self) -> Tuple[object, float, float]:
        """(op, prescale, postscale) of a gradient collective: gradient_predivide_factor f splits
        the average into 1/f before and f/size after the sum (size: the process set's)."""
        op, f = self._optimizer.op, self._optimizer.gradient_predivide_factor
        if op == Average and f != 1.0:
            return Sum, 1.0 / f, f / set_size(self._process_set)
        return op, 1.0, 1.0

    @property
    def compression(self):
        """The ``compression=`` the optimizer was given: an engine that runs a compression of its
        own (sync with Compression.powersgd) reads its settings here."""
        return self._compression

    # -- acting ----------------------------------------------------------------------------------
    def compress(self, tensor: torch.Tensor):
        """(compressed tensor, ctx): the optimizer's compression of a tensor to be reduced."""
        return self._compression.compress(tensor)

    def decompress(self, tensor: torch.Tensor, ctx) -> torch.Tensor:
        return self._compression.decompress(tensor, ctx)

    def base_step(self, *args):
        """Runs the wrapped optimizer's own step() on the parameters' current ``p.grad`` (args,
        a closure, are passed on as given), bypassing dadt's step()."""
        return self._base_step(*args)

    def base_step_on(self, params: List[torch.Tensor]):
        """The wrapped optimizer's own step() on `params` only: each of ``param_groups`` holds,
        for the call, just its members that are in `params` (in its own order), and gets its whole
        list back afterwards, also when the step raises."""
        members = {id(p) for p in params}
        groups = self.param_groups
        full = [group["params"] for group in groups]
        try:
            for group, ps in zip(groups, full):
                group["params"] = [p for p in ps if id(p) in members]
            return self._base_step()
        finally:
            for group, ps in zip(groups, full):
                group["params"] = ps

    def step_is_separable(self) -> bool:
        """Whether the wrapped optimizer's step() updates each parameter from that parameter's
        gradient and state alone, so that stepping the parameters in parts gives the same bits as
        one step: true for torch's elementwise optimizers (SEPARABLE_OPTIMIZERS) used as they are,
        with no step hooks (they would run once per part)."""
        for klass in type(self._optimizer).__mro__[1:]:  # [0] is DistributedOptimizer's class
            if "step" in klass.__dict__:
                if klass not in SEPARABLE_OPTIMIZERS:
                    return False
                break
        opt = self._optimizer
        hooks = [getattr(opt, "_optimizer_step_pre_hooks", None),
                 getattr(opt, "_optimizer_step_post_hooks", None),
                 getattr(_torch_optimizer, "_global_optimizer_pre_hooks", None),
                 getattr(_torch_optimizer, "_global_optimizer_post_hooks", None)]
        return not any(hooks)


# torch optimizers whose update of a parameter reads only that parameter, its gradient and its
# own state (no norm or statistic across parameters), in the classes' own step().
SEPARABLE_OPTIMIZERS = frozenset(
    getattr(torch.optim, name) for name in
    ("SGD", "Adam", "AdamW", "Adagrad", "Adamax", "RMSprop", "NAdam", "RAdam", "Adadelta")
    if hasattr(torch.optim, name))
