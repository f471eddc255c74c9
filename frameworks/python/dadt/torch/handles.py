"""The handle table behind dadt's asynchronous torch collectives.

Every ``*_async`` call enqueues a collective in the runtime and registers it here under an int
handle; ``poll(handle)`` tests it and ``synchronize(handle)`` waits for it and returns its output.
Tensors cross to the runtime as DLPack capsules (``tensor.__dlpack__()``, read but not consumed
by ``dadt._core``); the table keeps the capsules and the tensors alive until the handle is
synchronized, so the runtime never writes into freed memory.

Names: every rank must submit the same collectives with the same names. When ``name`` is None a
name ``'<op>.noname.<n>'`` is generated from a per-op counter, so ranks that call collectives in
the same order (as Horovod requires) agree on it.
"""

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

import torch
import torch.utils.dlpack

from dadt.common.basics import _core, call, host_staged, on_new_incarnation, wait_all
from dadt.common.exceptions import DadtInternalError, DeviceMismatchError
from dadt.common import in_flight
from dadt.common.in_flight import InFlightNames
from dadt.common.process_sets import enqueue_kwargs
from dadt.common.util import NOT_INITIALIZED, Average, collective_name

_SUPPORTED_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.int64,
                     torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool)


class Member(NamedTuple):
    """One enqueued collective: the runtime's handle, its in-flight key (the name; with the
    process set id for another set than the global one), and what must outlive it."""
    handle: int
    name: Any
    keep: Tuple[Any, ...]  # capsules and tensors
    # A GPU tensor staged through host memory: (GPU output, host result) copied back on success.
    copy_back: Optional[Tuple[Any, Any]] = None


class _Pending(NamedTuple):
    handles: List[int]     # the runtime's handles (one, or one per group member)
    members: List[Member]
    output: Any            # what synchronize() returns, unless `finish` computes it
    finish: Optional[Callable[[List[int]], Any]]  # runs after a successful wait, before release


# The torch layer's state: handle -> _Pending; the names of collectives the runtime still runs
# (Horovod's rule: a name is free again once its collective completed, synchronized or not;
# dadt.common.in_flight); unnamed collectives are named by dadt.common.util.collective_name.
_handle_map: Dict[int, _Pending] = {}
_names_in_flight = InFlightNames()
# Handles of earlier incarnations never synchronized: synchronize() refuses them (ValueError).
_stale_handles: Set[int] = set()


@on_new_incarnation
def _forget_previous_incarnation() -> None:
    _stale_handles.update(_handle_map)
    _handle_map.clear()
    _names_in_flight.clear()
auto_name = collective_name  # '<op>.noname.<n>' for name=None (dadt.common.util)


def check_tensor(tensor: Any, name: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tensor '%s' must be a torch.Tensor, got %s" % (name, type(tensor).__name__))
    if not (tensor.is_cpu or tensor.is_cuda):  # attributes: no device object per call
        raise ValueError("tensor '%s' is on %s; dadt takes CPU and CUDA tensors"
                         % (name, tensor.device))
    if tensor.layout != torch.strided:
        raise ValueError("tensor '%s' has layout %s; dadt collectives take dense tensors"
                         % (name, tensor.layout))
    if tensor.dtype not in _SUPPORTED_DTYPES:
        raise ValueError("tensor '%s' has dtype %s, which dadt does not support; use one of %s"
                         % (name, tensor.dtype, ", ".join(str(d) for d in _SUPPORTED_DTYPES)))
    if not tensor.is_contiguous():
        raise ValueError("tensor '%s' is not contiguous; call .contiguous() on it before passing "
                         "it to dadt" % name)


def check_same_device(tensors: List[torch.Tensor], names: List[str]) -> None:
    """The members of a grouped collective are reduced in one fused buffer: one device for all."""
    first = tensors[0].device
    for tensor, name in zip(tensors[1:], names[1:]):
        if tensor.device != first:
            raise DeviceMismatchError(
                "grouped collective: member '%s' is on %s but member '%s' is on %s; every member "
                "of a group must be on the same device" % (name, tensor.device, names[0], first))


def enqueue(op_type: int, name: str, tensor: Optional[torch.Tensor],
            output: Optional[torch.Tensor] = None, reduce_op: int = Average,
            prescale_factor: float = 1.0, postscale_factor: float = 1.0, root_rank: int = 0,
            splits: Optional[List[int]] = None, group_id: int = -1,
            group_size: int = 0, process_set=None, **point_to_point: Any) -> Member:
    """Enqueues one collective in the runtime, on ``process_set`` (None: the global set); pass
    the result to `register()`. ``point_to_point``: send_ranks, recv_ranks, withdraw
    (dadt.torch.p2p)."""
    if not _core.is_initialized():
        raise ValueError(NOT_INITIALIZED)
    set_kwargs = enqueue_kwargs(process_set)
    name_key = in_flight.key(name, set_kwargs.get("process_set_id", 0))
    _names_in_flight.check(name_key)
    stream, staged_device, copy_back = 0, -1, None
    gpu = tensor is not None and tensor.is_cuda
    if gpu and _core.device_backend() == "nccl" and not host_staged(op_type):
        # The runtime orders its work after the tensor's current stream (no host wait here).
        stream = torch.cuda.current_stream(tensor.device).cuda_stream
    elif gpu:
        # No GPU data plane (Gloo or MPI executor), or this collective's executor is the host
        # engine (init(broad_cast_executor='nccl', all_reduce_executor='mpi')): through host memory.
        staged_device = tensor.device.index
        gpu_output, in_place = output, output is tensor
        tensor = tensor.detach().cpu()
        if gpu_output is not None:
            output = tensor if in_place else torch.empty(gpu_output.shape, dtype=gpu_output.dtype)
            copy_back = (gpu_output, output)
    # detach(): DLPack refuses tensors that require grad; the view shares the same memory.
    in_capsule = None if tensor is None else _capsule(tensor)
    out_capsule = None
    if output is tensor:
        out_capsule = in_capsule
    elif output is not None:
        out_capsule = _capsule(output)
    handle = call(_core.enqueue, op_type, name, in_capsule, out_capsule, int(reduce_op),
                  float(prescale_factor), float(postscale_factor), int(root_rank), splits,
                  group_id, group_size, stream, staged_device, **set_kwargs, **point_to_point)
    _names_in_flight.add(name_key, handle)
    return Member(handle, name_key, (in_capsule, out_capsule, tensor, output), copy_back)


def _capsule(tensor: torch.Tensor) -> Any:
    # to_dlpack: no stream handshake (__dlpack__ would synchronise streams); the runtime orders
    # its own stream after the framework's with an event. DLPack refuses a tensor that requires
    # grad: a detached view (the same memory) goes instead; others go as they are.
    return _to_dlpack(tensor.detach() if tensor.requires_grad else tensor)


_to_dlpack = torch.utils.dlpack.to_dlpack


def register(members: List[Member], output: Any = None,
             finish: Optional[Callable[[List[int]], Any]] = None) -> int:
    """Enters enqueued collectives into the handle table under one handle, the first's."""
    handles = [m.handle for m in members]
    _handle_map[handles[0]] = _Pending(handles, members, output, finish)
    return handles[0]


def take_output(handle: int, like: torch.Tensor) -> torch.Tensor:
    capsule = _core.take_output(handle)
    if capsule is None:
        raise DadtInternalError("the runtime returned no output for handle %d" % handle)
    output = torch.from_dlpack(capsule)
    if output.device != like.device:  # staged through host memory: back to the tensor's GPU
        output = output.to(like.device)
    if output.dtype != like.dtype:  # e.g. bool that crossed as uint8
        same_size = output.element_size() == like.element_size()
        output = output.view(like.dtype) if same_size else output.to(like.dtype)
    return output


def poll(handle: int) -> bool:
    """Polls an allreduce, allgather, alltoall, broadcast or reducescatter handle to determine
    whether the underlying asynchronous operation has completed. After `poll()` returns `True`,
    `synchronize()` will return without blocking.

    Arguments:
        handle: A handle returned by an asynchronous collective.

    Returns:
        A flag indicating whether the operation has completed.
    """
    pending = _handle_map.get(handle)
    if pending is None:
        raise ValueError("unknown dadt handle %r (already synchronized?)" % (handle,))
    return all(call(_core.poll, h) for h in pending.handles)


def synchronize(handle: int):
    """Synchronizes an asynchronous collective until it's completed. Returns the result of the
    operation.

    Arguments:
        handle: A handle returned by an asynchronous collective.

    Returns:
        The output of the operation: a tensor (the input tensor itself for in-place operations),
        a list of tensors for grouped allreduce, (output, received_splits) for alltoall.
        None for an unknown handle.
    """
    pending = _handle_map.get(handle)
    if pending is None:
        if handle in _stale_handles:
            _stale_handles.discard(handle)
            raise ValueError("dadt handle %r belongs to an earlier init(): dadt was shut down since"
                             % (handle,))
        return None
    error = wait_all(pending.handles)
    # Only now, with every member done, does the entry go: a KeyboardInterrupt inside wait() leaves
    # it (and the tensors it keeps alive) in place, and synchronize() can be called again.
    del _handle_map[handle]
    try:
        if error is not None:
            raise error from None
        for m in pending.members:
            if m.copy_back is not None:
                m.copy_back[0].copy_(m.copy_back[1])
        return pending.finish(pending.handles) if pending.finish else pending.output
    finally:
        for m in pending.members:
            _core.release(m.handle)
            _names_in_flight.discard(m.name, m.handle)
