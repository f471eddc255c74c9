"""Helpers that synchronize model and optimizer state and Python objects across ranks."""

import ctypes
import itertools
import pickle
from typing import Any, List, Optional

import torch

from dadt.common.basics import rank
from dadt.common.process_sets import global_process_set, set_id, set_size
from dadt.common.util import Average, Sum
from dadt.torch.collectives import allgather
from dadt.torch.handles import auto_name, synchronize
from dadt.torch.async_collectives import allgather_async, broadcast_, broadcast_async_

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
           "allgather_object"]


def broadcast_parameters(params, root_rank: int, process_set=global_process_set) -> None:
    """Broadcasts the parameters from root rank to all other processes. Typical usage is to
    broadcast the ``model.state_dict()``, ``model.named_parameters()``, or
    ``model.parameters()``.

    Arguments:
        params: One of the following:
            - list of parameters to broadcast
            - dict of parameters to broadcast
            - iterable of (name, parameter) pairs, e.g. ``model.named_parameters()``
        root_rank: The rank of the process from which parameters will be broadcasted to all
            other processes (a global rank, a member of `process_set`).
        process_set: Process set whose ranks take part (default: every rank).
    """
    if isinstance(params, dict):
        params = sorted(params.items())
    elif not isinstance(params, (torch.Tensor, str)) and hasattr(params, "__iter__"):
        # support both named_parameters() and regular parameters()
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))

    # Run asynchronous broadcasts, in place.
    handles = []
    for name, p in params:
        handles.append(broadcast_async_(p, root_rank, name, process_set=process_set))

    # Wait for completion.
    for handle in handles:
        synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank: int, process_set=global_process_set) -> None:
    """Broadcasts an optimizer state from root rank to all other processes.

    Afterwards every rank holds root rank's state: the hyperparameters of each parameter group
    (learning rate, betas, ...) and the per-parameter state. Torch creates that state lazily on
    the first step(), so a newly created optimizer may have none; rather than stepping it once
    on zero gradients (Horovod's way, which moves momentum buffers when weight decay is on),
    root rank first broadcasts a description of its state (hyperparameters, non-tensor state,
    and each state tensor's shape and dtype) and the other ranks allocate whatever they lack
    before the tensors are broadcast in place. As after Horovod's step, every parameter that
    requires a gradient has one afterwards (zeros where it had none).

    Arguments:
        optimizer: An optimizer (a torch.optim.Optimizer or a DistributedOptimizer).
        root_rank: The rank of the process from which the optimizer will be broadcasted to all
            other processes (a global rank, a member of `process_set`).
        process_set: Process set whose ranks take part (default: every rank).
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    is_root = rank() == root_rank
    options, scalars, tensors = [], {}, []
    if is_root:
        for gi, group in enumerate(optimizer.param_groups):
            options.append({k: v for k, v in group.items() if k != "params"})
            for pi, p in enumerate(group["params"]):
                state = optimizer.state.get(p, {})
                for key in sorted(state, key=str):
                    value = state[key]
                    if torch.is_tensor(value):
                        tensors.append((gi, pi, key, tuple(value.shape), value.dtype))
                    else:
                        scalars[(gi, pi, key)] = value
    options, scalars, tensors = broadcast_object((options, scalars, tensors), root_rank,
                                                 name="optimizer_state.layout",
                                                 process_set=process_set)

    handles = []
    for gi, pi, key, shape, dtype in tensors:
        state = optimizer.state[optimizer.param_groups[gi]["params"][pi]]
        value = state.get(key)
        if not (torch.is_tensor(value) and tuple(value.shape) == shape and value.dtype == dtype
                and value.is_contiguous() and value.device.type == "cpu"):
            value = state[key] = torch.empty(shape, dtype=dtype)
        handles.append(broadcast_async_(value, root_rank, "optimizer_state.%d.%d.%s"
                                        % (gi, pi, key), process_set=process_set))
    for handle in handles:
        synchronize(handle)
    mode_state = getattr(optimizer, "_broadcast_mode_state", None)  # DistributedOptimizer modes
    if mode_state is not None:
        mode_state(root_rank)
    # Horovod's zero-gradient step leaves every parameter that requires a gradient with one (zeros
    # where it had none), and scripts (Horovod's own tests among them) read it afterwards.
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)
    if is_root:
        return

    for group, opts in zip(optimizer.param_groups, options):
        group.update(opts)
    keep = set(scalars) | {(gi, pi, key) for gi, pi, key, _, _ in tensors}
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            state = optimizer.state.get(p)
            if state is None:
                continue
            for key in [k for k in state if (gi, pi, k) not in keep]:
                del state[key]  # root has no such state: drop ours
            if not state:
                del optimizer.state[p]
    for (gi, pi, key), value in scalars.items():
        optimizer.state[optimizer.param_groups[gi]["params"][pi]][key] = value


def _to_bytes_tensor(obj: Any) -> torch.Tensor:
    data = bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    return torch.frombuffer(data, dtype=torch.uint8).clone()  # clone: own the memory


def _from_bytes_tensor(t: torch.Tensor) -> Any:
    t = t.contiguous()
    return pickle.loads(ctypes.string_at(t.data_ptr(), t.numel()))


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None,
                     process_set=global_process_set) -> Any:
    """Serializes and broadcasts an object from root rank to all other processes. Typical usage
    is to broadcast the `optimizer.state_dict()`, for example:

    .. code-block:: python

        state_dict = broadcast_object(optimizer.state_dict(), 0)
        if dadt.rank() > 0:
            optimizer.load_state_dict(state_dict)

    The object is serialized with the standard library's pickle (no lambdas or local classes).

    Arguments:
        obj: An object capable of being serialized without losing any context.
        root_rank: The rank of the process from which parameters will be broadcasted to all
            other processes.
        name: Optional name to use during broadcast; the same on every rank (generated when
            None).
        process_set: Process set whose ranks take part (default: every rank); `root_rank` is
            a global rank that is a member.

    Returns:
        The object that was broadcast from the `root_rank`.
    """
    name = auto_name("broadcast_object", name, process_set)
    if rank() == root_rank:
        t = _to_bytes_tensor(obj)
        sz = torch.tensor([t.numel()], dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz", process_set=process_set)
    else:
        sz = torch.zeros(1, dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz", process_set=process_set)
        t = torch.empty(int(sz.item()), dtype=torch.uint8)
    broadcast_(t, root_rank, name + ".t", process_set=process_set)
    if rank() != root_rank:
        obj = _from_bytes_tensor(t)
    return obj


def allgather_object(obj: Any, name: Optional[str] = None,
                     process_set=global_process_set) -> List[Any]:
    """Serializes and allgathers an object from all other processes.

    Arguments:
        obj: An object capable of being serialized without losing any context.
        name: Optional name to use during allgather; the same on every rank (generated when
            None).
        process_set: Process set whose ranks take part (default: every rank).

    Returns:
        The list of objects that were allgathered across the ranks of `process_set`, in rank
        order.
    """
    name = auto_name("allgather_object", name, process_set)
    t = _to_bytes_tensor(obj)
    sizes = allgather(torch.tensor([t.numel()], dtype=torch.int64), name=name + ".sz",
                      process_set=process_set).tolist()
    gathered = allgather(t, name=name + ".t", process_set=process_set)
    offsets = [0] + list(itertools.accumulate(sizes))
    return [_from_bytes_tensor(gathered[offsets[i]:offsets[i + 1]]) for i in range(len(sizes))]


def sparse_allreduce_async(tensor, name: str, op: int, process_set=global_process_set):
    """Starts an allreduce of a sparse COO tensor as Horovod does: its indices and values are
    allgathered (so every rank's nonzeros travel, not a dense copy) and summed by coalescing.
    Returns a function that waits and returns the reduced sparse tensor (divided by
    the process set's size for Average).

    Arguments:
        tensor: A sparse COO tensor (torch.sparse_coo).
        name: The collectives' name prefix (``<name>.indices``, ``<name>.values``).
        op: Sum or Average.
        process_set: Process set whose ranks take part (default: every rank).
    """
    set_id(process_set)
    if not (isinstance(tensor, torch.Tensor) and tensor.layout == torch.sparse_coo):
        raise ValueError("sparse_allreduce_async takes a sparse COO tensor, got %s"
                         % (tensor.layout if isinstance(tensor, torch.Tensor) else type(tensor)))
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async reduces with Sum or Average only")
    # Allgather concatenates along the first dimension: one row per nonzero.
    indices = allgather_async(tensor._indices().t().contiguous(), name="%s.indices" % name,
                              process_set=process_set)
    values = allgather_async(tensor._values().contiguous(), name="%s.values" % name,
                             process_set=process_set)

    def finish():
        gathered_values = synchronize(values)
        gathered_indices = synchronize(indices)
        if op == Average:
            gathered_values = gathered_values / set_size(process_set)
        return torch.sparse_coo_tensor(gathered_indices.t(), gathered_values, tensor.size())

    return finish
