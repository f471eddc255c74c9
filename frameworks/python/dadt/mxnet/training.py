"""Data-parallel training with MXNet: Horovod's DistributedOptimizer (any mx.optimizer.Optimizer),
DistributedTrainer (Gluon) and broadcast_parameters.

The gradients are averaged in the runtime: each reduction is an Average with prescale
``1 / gradient_predivide_factor`` and postscale ``gradient_predivide_factor`` (the sum is then
divided by the number of processes, as Horovod's split of the averaging says). Horovod instead sums
and folds ``1 / size()`` into the optimizer's ``rescale_grad`` (the trainer's ``_scale``); the
update is the same, but here the gradients a user reads after ``allreduce_grads()`` are the
averages, and ``rescale_grad`` stays what the user set.
"""

import types
from collections import defaultdict
from typing import Any, Dict, List

import mxnet as mx

from dadt.common.basics import size
from dadt.common.process_sets import global_process_set, keeps_own_gradients
from dadt.common.util import Average, split_list
from dadt.mxnet.compression import Compression
from dadt.mxnet.ops import broadcast_, broadcast_many_, grouped_allreduce_

__all__ = ["DistributedOptimizer", "DistributedTrainer", "broadcast_parameters"]


def _check_predivide(factor: float) -> float:
    factor = float(factor)
    if not factor > 0.0:
        raise ValueError("gradient_predivide_factor must be > 0, got %r" % factor)
    return factor


def _reduce_in_place(grads: List[mx.nd.NDArray], names: List[str], num_groups: int,
                     predivide: float, process_set) -> None:
    """Averages ``grads`` in place: one grouped allreduce per group (``num_groups`` groups of
    about equal count, or one for all when 0), named after their first and last member."""
    groups = split_list(list(range(len(grads))), num_groups) if num_groups > 0 else [
        list(range(len(grads)))]
    for members in groups:
        if not members:
            continue
        # Horovod enqueues one group per dtype; the runtime fuses mixed dtypes itself, but a
        # group per dtype keeps the names the same whatever the fusion.
        by_dtype: Dict[Any, List[int]] = defaultdict(list)
        for i in members:
            by_dtype[grads[i].dtype].append(i)
        for indices in by_dtype.values():
            grouped_allreduce_([grads[i] for i in indices],
                               name="%s:%s" % (names[indices[0]], names[indices[-1]]),
                               op=Average, prescale_factor=1.0 / predivide,
                               postscale_factor=predivide, process_set=process_set)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an ``mx.optimizer.Optimizer`` so that each update first averages the gradient over
    every process (in place) and then runs the wrapped update.

    For the Module API and for a plain ``gluon.Trainer`` (kvstore=None); with Gluon prefer
    DistributedTrainer, which reduces all gradients of a step at once. Every attribute (learning
    rate, ``rescale_grad``, ``param_dict``, ...) is the wrapped optimizer's, read and written
    through. ``num_groups`` > 0 splits a multi-tensor update (``aggregate_num`` > 1) into that many
    grouped allreduces; 0 reduces it as one. ``process_set``: the processes that average (a rank
    outside it keeps its own gradients, as in Horovod's other front ends).
    """

    _OWN = ("_optimizer", "_predivide", "_num_groups", "_process_set")

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=global_process_set):
        # No Optimizer.__init__: this object has no state of its own beyond the fields below.
        object.__setattr__(self, "_optimizer", optimizer)
        object.__setattr__(self, "_predivide", _check_predivide(gradient_predivide_factor))
        object.__setattr__(self, "_num_groups", int(num_groups))
        object.__setattr__(self, "_process_set", process_set)

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def __setattr__(self, key, value):
        if key in self._OWN:
            object.__setattr__(self, key, value)
        else:
            setattr(self._optimizer, key, value)

    # Trainer.save_states/load_states pickle the optimizer: Optimizer's own __getstate__ expects
    # the fields of Optimizer.__init__, which live in the wrapped optimizer.
    def __getstate__(self):
        return {key: getattr(self, key) for key in self._OWN}

    def __setstate__(self, state):
        for key in self._OWN:
            object.__setattr__(self, key, state[key])

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _allreduce(self, index, grad) -> None:
        if size() == 1 or keeps_own_gradients(self._process_set):
            return
        indices = list(index) if isinstance(index, (tuple, list)) else [index]
        grads = list(grad) if isinstance(grad, (tuple, list)) else [grad]
        names = ["DistributedOptimizer.%s" % i for i in indices]
        _reduce_in_place(grads, names, self._num_groups, self._predivide, self._process_set)

    def update(self, index, weight, grad, state):
        self._allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        self._allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A ``gluon.Trainer`` whose ``step()`` (and ``allreduce_grads()``) averages the gradients over
    every process with dadt instead of a kvstore.

    Arguments are Horovod's: ``params``, ``optimizer`` (a name or an ``mx.optimizer.Optimizer``;
    a DistributedOptimizer is unwrapped, with a warning), ``optimizer_params``, ``compression``
    (``Compression.none`` or ``.fp16``), ``gradient_predivide_factor``, ``prefix`` (the base of
    the collective names: give two trainers of one program different prefixes), ``num_groups``
    (0: the step's gradients go as one grouped allreduce per dtype; N: N groups), and dadt's
    ``process_set``. Dense gradients on one CPU context per process.
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0,
                 process_set=global_process_set):
        if isinstance(optimizer, DistributedOptimizer):
            import warnings
            warnings.warn("DistributedTrainer reduces the gradients itself; the "
                          "DistributedOptimizer it was given is unwrapped")
            optimizer = optimizer._optimizer
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("prefix must be a str or None, got %s" % type(prefix).__name__)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._dadt_compression = compression
        self._dadt_predivide = _check_predivide(gradient_predivide_factor)
        self._dadt_prefix = prefix or ""
        self._dadt_num_groups = int(num_groups)
        self._dadt_process_set = process_set

    def _allreduce_grads(self):
        if size() == 1 or keeps_own_gradients(self._dadt_process_set):
            return
        params = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]
        if not params:
            return
        grads, sent, contexts, names = [], [], [], []
        for i, param in params:
            grad = param.list_grad()[0]
            if grad.stype != "default":
                raise ValueError("parameter %s has a %s gradient; dadt.mxnet reduces dense "
                                 "gradients (use sparse_grad=False)" % (param.name, grad.stype))
            compressed, ctx = self._dadt_compression.compress(grad)
            grads.append(grad)
            sent.append(compressed)
            contexts.append(ctx)
            names.append("%s%d" % (self._dadt_prefix, i))
        _reduce_in_place(sent, names, self._dadt_num_groups, self._dadt_predivide,
                         self._dadt_process_set)
        for grad, compressed, ctx in zip(grads, sent, contexts):
            if compressed is not grad:
                grad[:] = self._dadt_compression.decompress(compressed, ctx)


def _broadcast_after_init(param, root_rank: int, name: str, process_set) -> None:
    """A parameter with deferred initialization has no data yet: broadcast it right after MXNet
    initializes it (at the first forward pass, which every process runs)."""
    original = param._init_impl

    def init_then_broadcast(self, *args, **kwargs):
        original(*args, **kwargs)
        broadcast_(self.list_data()[0], root_rank, name=name, process_set=process_set)
        for other in self.list_data()[1:]:
            self.list_data()[0].copyto(other)

    param._init_impl = types.MethodType(init_then_broadcast, param)


def broadcast_parameters(params, root_rank=0, prefix=None, process_set=global_process_set):
    """Gives every process root rank's parameters, in place: ``params`` is a dict or a
    ``ParameterDict`` (``block.collect_params()``, ``module.get_params()[0]``) of Parameters or
    NDArrays, broadcast in the order of their sorted names, all in flight at once. A Parameter
    whose initialization is deferred is broadcast when MXNet initializes it. ``prefix`` goes
    before each name (two calls with the same names in flight need different prefixes)."""
    valid = (dict,)
    if hasattr(mx.gluon.parameter, "ParameterDict"):
        valid = (dict, mx.gluon.parameter.ParameterDict)
    if not isinstance(params, valid):
        raise ValueError("broadcast_parameters takes a dict or a ParameterDict, got %s"
                         % type(params).__name__)
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError("prefix must be a str or None, got %s" % type(prefix).__name__)
    if size() == 1:
        return
    prefix = prefix or ""
    tensors, names, copies = [], [], []
    for key, value in sorted(params.items(), key=lambda kv: str(kv[0])):
        name = prefix + str(key)
        if isinstance(value, mx.gluon.parameter.Parameter):
            try:
                data = value.list_data()
            except mx.gluon.parameter.DeferredInitializationError:
                _broadcast_after_init(value, root_rank, name, process_set)
                continue
            tensors.append(data[0])
            copies.append(data[1:])
        else:
            tensors.append(value)
            copies.append([])
        names.append(name)
    broadcast_many_(tensors, names, root_rank, process_set)
    for tensor, others in zip(tensors, copies):
        for other in others:
            tensor.copyto(other)
