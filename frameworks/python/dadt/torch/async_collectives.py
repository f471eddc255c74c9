"""Asynchronous and in-place collectives on torch tensors: Horovod's mpi_ops API, also importable
as ``dadt.torch.mpi_ops`` (Horovod's module name; it holds no MPI).

Each ``*_async`` function returns an int handle at once; pass it to ``poll()`` or
``synchronize()``. The synchronous, differentiable forms (``allreduce``, ``allgather``, ...) are in
``dadt.torch.collectives``. Inputs must be contiguous CPU tensors of a supported dtype.
"""

import hashlib
from typing import List, Optional

import torch

from dadt.common.basics import _core
from dadt.common import in_flight
from dadt.common.process_sets import global_process_set, set_id
from dadt.torch import handles
from dadt.common.util import (OP_ALLGATHER, OP_ALLREDUCE, OP_ALLTOALL, OP_BARRIER, OP_BROADCAST,
                              OP_JOIN, OP_REDUCESCATTER, Adasum, Average, Max, Min, Product, Sum,
                              handle_average_backwards_compatibility)
from dadt.torch.handles import (auto_name, check_same_device, check_tensor, enqueue, register,
                                take_output, poll, synchronize)

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce_async", "allreduce_async_", "allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_allreduce_",
    "allgather_async", "broadcast_async", "broadcast_async_", "broadcast_",
    "alltoall_async", "reducescatter_async", "grouped_allgather_async",
    "grouped_reducescatter_async", "barrier", "join", "poll", "synchronize",
]


def _allreduce_async(tensor, in_place, name, op, prescale_factor, postscale_factor,
                     process_set) -> int:
    check_tensor(tensor, name)
    output = tensor if in_place else torch.empty_like(tensor, memory_format=torch.contiguous_format)
    member = enqueue(OP_ALLREDUCE, name, tensor, output, op, prescale_factor, postscale_factor,
                     process_set=process_set)
    return register([member], output)


def allreduce_async(tensor, average=None, name=None, op=None,
                    prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """A function that performs asynchronous averaging or summation of the input tensor over all
    the dadt processes. The input tensor is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all dadt
    processes for a given name. The reduction will not start until all processes are ready to
    send and receive the tensor.

    Arguments:
        tensor: A tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A name of the reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults to
            Average if None is given.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set whose ranks take part (default: every rank); Average divides
            by its size.

    Returns:
        A handle to the allreduce operation that can be used with `poll()` or `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    name = auto_name("allreduce", name, process_set)
    return _allreduce_async(tensor, False, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None,
                     prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """A function that performs asynchronous in-place averaging or summation of the input tensor
    over all the dadt processes. Arguments are those of `allreduce_async()`.

    Returns:
        A handle to the allreduce operation that can be used with `poll()` or `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    name = auto_name("allreduce", name, process_set)
    return _allreduce_async(tensor, True, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None,
               prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set) -> torch.Tensor:
    """A function that performs in-place averaging or summation of the input tensor over all the
    dadt processes. Arguments are those of `allreduce_async()`.

    Returns:
        A tensor of the same shape and type as `tensor`, averaged or summed across all processes.
    """
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _group(kind, tensors, name, process_set):
    """Checks a grouped collective's members (everything the runtime could refuse, before any is
    enqueued: a refused member would leave the ones before it waiting for a group that never
    completes) and returns (tensors, member names, group id)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped %s needs at least one tensor" % kind)
    name = auto_name("grouped_" + kind, name, process_set)
    names = ["%s.%d" % (name, i) for i in range(len(tensors))]
    set_id_ = set_id(process_set)  # an unregistered set is refused before any member is enqueued
    for tensor, member in zip(tensors, names):
        check_tensor(tensor, member)
        handles._names_in_flight.check(in_flight.key(member, set_id_))
    check_same_device(tensors, names)
    # The id names the group on every rank alike, whatever order ranks submit groups in: a hash
    # of the member names (unique among in-flight collectives by contract).
    digest = hashlib.blake2b("\0".join(names).encode(), digest_size=8).digest()
    return tensors, names, int.from_bytes(digest, "little") & (2**63 - 1)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    tensors, names, group_id = _group("allreduce", tensors, name, process_set)
    for tensor, member in zip(tensors, names):
        if tensor.dtype == torch.bool and (op == Average or prescale_factor != 1.0
                                           or postscale_factor != 1.0):
            raise ValueError("tensor '%s' is bool: Average and scale factors are not defined for "
                             "bool; use Sum or Max (logical or) or Min or Product (logical and)"
                             % member)
    outputs = tensors if outputs is None else outputs(tensors)
    members = [enqueue(OP_ALLREDUCE, member, tensor, output, op, prescale_factor,
                       postscale_factor, group_id=group_id, group_size=len(tensors),
                       process_set=process_set)
               for tensor, output, member in zip(tensors, outputs, names)]
    return register(members, list(outputs))


def grouped_allreduce_async(tensors, average=None, name=None, op=None,
                            prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """A function that performs asynchronous averaging or summation of the input tensor list over
    all the dadt processes. The input tensors are not modified. The members are reduced together
    (as one fused collective) and are named ``'<name>.<i>'``.

    Arguments:
        tensors: A list of tensors to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A base name to use for the group reduction operation.
        op: The reduction operation to combine tensors across different ranks. Defaults to
            Average if None is given.
        prescale_factor: Multiplicative factor to scale tensors before allreduce.
        postscale_factor: Multiplicative factor to scale tensors after allreduce.

    Returns:
        A handle to the group allreduce operation that can be used with `poll()` or
        `synchronize()`; `synchronize()` returns the list of reduced tensors.
    """
    op = handle_average_backwards_compatibility(op, average)

    def outputs(ts):
        return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in ts]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None,
                             prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """A function that performs asynchronous in-place averaging or summation of the input tensors
    over all the dadt processes. Arguments are those of `grouped_allreduce_async()`.

    Returns:
        A handle to the group allreduce operation that can be used with `poll()` or
        `synchronize()`.
    """
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None,
                       prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set) -> List[torch.Tensor]:
    """A function that performs in-place averaging or summation of the input tensors over all
    the dadt processes. Arguments are those of `grouped_allreduce_async()`.

    Returns:
        The list of input tensors, averaged or summed across all processes.
    """
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def _check_out(out, tensor, name):
    """`out=` of allgather / reducescatter: a contiguous tensor of the input's dtype and device
    whose dimensions but the first match the input's (the runtime checks the first)."""
    check_tensor(out, name)
    if (out.dtype != tensor.dtype or out.dim() != max(tensor.dim(), 1)
            or tuple(out.shape[1:]) != tuple(tensor.shape[1:])):
        raise ValueError("out= of '%s' must have the input's dtype (%s) and all dimensions but the "
                         "first (%s), got %s %s" % (name, tensor.dtype, tuple(tensor.shape[1:]),
                                                    out.dtype, tuple(out.shape)))


def allgather_async(tensor, name=None, process_set=global_process_set, out=None) -> int:
    """A function that asynchronously concatenates the input tensor with the same input tensor on
    all other dadt processes. The input tensor is not modified.

    The concatenation is done on the first dimension, so the input tensors on the different
    processes must have the same rank and shape, except for the first dimension, which is allowed
    to be different.

    Arguments:
        tensor: A tensor to allgather.
        name: A name of the allgather operation.
        process_set: Process set whose ranks take part (default: every rank); blocks are
            ordered by rank within the set.
        out: Optional preallocated result (sum of the first dimensions of all ranks' inputs);
            the runtime writes into it instead of allocating, and `synchronize()` returns it.
            A wrong first dimension fails the collective (and the job) with an error naming it.

    Returns:
        A handle to the allgather operation that can be used with `poll()` or `synchronize()`.
    """
    name = auto_name("allgather", name, process_set)
    check_tensor(tensor, name)
    if out is not None:
        _check_out(out, tensor, name)
        return register([enqueue(OP_ALLGATHER, name, tensor, out, process_set=process_set)], out)
    member = enqueue(OP_ALLGATHER, name, tensor, process_set=process_set)
    return register([member], finish=lambda hs: take_output(hs[0], tensor))


def _broadcast_async(tensor, output, root_rank, name, process_set) -> int:
    member = enqueue(OP_BROADCAST, name, tensor, output, root_rank=root_rank,
                     process_set=process_set)
    return register([member], output)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """A function that asynchronously broadcasts the input tensor on root rank to the same input
    tensor on all other dadt processes. The input tensor is not modified.

    The broadcast operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all dadt
    processes for a given name. The broadcast will not start until all processes are ready to
    send and receive the tensor.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The rank to broadcast the value from (a global rank, a member of
            `process_set`).
        name: A name of the broadcast operation.
        process_set: Process set whose ranks take part (default: every rank).

    Returns:
        A handle to the broadcast operation that can be used with `poll()` or `synchronize()`.
    """
    name = auto_name("broadcast", name, process_set)
    check_tensor(tensor, name)
    output = tensor.detach().clone()
    return _broadcast_async(output, output, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """A function that asynchronously broadcasts the input tensor on root rank to the same input
    tensor on all other dadt processes. The operation is performed in-place. Arguments are those
    of `broadcast_async()`.

    Returns:
        A handle to the broadcast operation that can be used with `poll()` or `synchronize()`.
    """
    name = auto_name("broadcast", name, process_set)
    check_tensor(tensor, name)
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set) -> torch.Tensor:
    """A function that broadcasts the input tensor on root rank to the same input tensor on all
    other dadt processes. The operation is performed in-place.

    Returns:
        The input tensor, holding the value broadcast from root rank.
    """
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _splits_list(splits) -> Optional[List[int]]:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dim() != 1 or splits.dtype.is_floating_point:
            raise ValueError("splits must be a 1-D integer tensor or a list of ints")
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set) -> int:
    """A function that scatters slices of the input tensor to all other dadt processes and
    returns a tensor of gathered slices from all other dadt processes. The input tensor is not
    modified.

    The slicing is done on the first dimension, so the input tensors on the different processes
    must have the same rank and shape, except for the first dimension, which is allowed to be
    different.

    Arguments:
        tensor: A tensor to distribute with alltoall.
        splits: A tensor or list of integers, in rank order, describing how many elements in
            `tensor` to send to each worker. Splitting is applied along the first dimension of
            `tensor`. If `splits` is not provided, the first dimension is split equally by the
            number of dadt processes.
        name: A name of the alltoall operation.
        process_set: Process set whose ranks take part (default: every rank); `splits` then has
            one entry per member, in rank order within the set.

    Returns:
        A handle to the alltoall operation that can be used with `poll()` or `synchronize()`;
        `synchronize()` returns a tuple (output, received_splits); received_splits is on the
        device `splits` was given on (the CPU for a list or None).
    """
    name = auto_name("alltoall", name, process_set)
    check_tensor(tensor, name)
    member = enqueue(OP_ALLTOALL, name, tensor, splits=_splits_list(splits),
                     process_set=process_set)
    # Horovod returns the received splits where the splits were given (a GPU tensor: that GPU).
    splits_device = splits.device if isinstance(splits, torch.Tensor) else torch.device("cpu")

    def finish(hs):
        received = torch.tensor(_core.received_splits(hs[0]), dtype=torch.int32, device=splits_device)
        return take_output(hs[0], tensor), received
    return register([member], finish=finish)


def reducescatter_async(tensor, name=None, op=Average,
                        prescale_factor=1.0, postscale_factor=1.0, out=None,
                        process_set=global_process_set) -> int:
    """A function that performs asynchronous reduction of the input tensor over all the dadt
    processes, then scatters the results across all dadt processes. The input tensor is not
    modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all dadt
    processes for a given name. The first dimension is split across ranks (ranks with lower
    numbers get one more row when it does not divide evenly).

    Arguments:
        tensor: A tensor to average/sum and scatter.
        name: A name of the reduce_scatter operation.
        op: The reduction operation to combine tensors across different ranks. Defaults to
            Average.
        prescale_factor: Multiplicative factor to scale tensor before reducescatter.
        postscale_factor: Multiplicative factor to scale tensor after reducescatter.
        out: Optional preallocated result (this rank's rows); the runtime writes into it instead
            of allocating, and `synchronize()` returns it. It must not overlap `tensor`, except
            that it may be exactly this rank's rows of `tensor` (in place: the other rows are
            left as they were).
        process_set: Process set whose ranks take part (default: every rank); the rows are
            split over its members.

    Returns:
        A handle to the reducescatter operation that can be used with `poll()` or
        `synchronize()`.
    """
    name = auto_name("reducescatter", name, process_set)
    check_tensor(tensor, name)
    if out is not None:
        _check_out(out, tensor, name)
    member = enqueue(OP_REDUCESCATTER, name, tensor, out, op, prescale_factor,
                     postscale_factor, process_set=process_set)
    if out is not None:
        return register([member], out)
    return register([member], finish=lambda hs: take_output(hs[0], tensor))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set) -> int:
    """Asynchronous allgather of a list of tensors, negotiated together: no member starts before
    every member is ready on every rank. Members are named ``'<name>.<i>'``. Arguments and
    per-tensor results are those of `allgather_async()`.

    Returns:
        A handle; `synchronize()` returns the list of gathered tensors.
    """
    tensors, names, group_id = _group("allgather", tensors, name, process_set)
    members = [enqueue(OP_ALLGATHER, member, tensor, group_id=group_id, group_size=len(tensors),
                       process_set=process_set)
               for tensor, member in zip(tensors, names)]
    return register(members, finish=lambda hs: [take_output(h, t) for h, t in zip(hs, tensors)])


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """Asynchronous reducescatter of a list of tensors, negotiated together. Members are named
    ``'<name>.<i>'``. Arguments and per-tensor results are those of `reducescatter_async()`.

    Returns:
        A handle; `synchronize()` returns the list of this rank's reduced shares.
    """
    tensors, names, group_id = _group("reducescatter", tensors, name, process_set)
    for tensor, member in zip(tensors, names):
        if tensor.dim() == 0:
            raise ValueError("reducescatter of tensor '%s': a scalar has no first dimension to "
                             "scatter" % member)
    members = [enqueue(OP_REDUCESCATTER, member, tensor, None, op, prescale_factor,
                       postscale_factor, group_id=group_id, group_size=len(tensors),
                       process_set=process_set)
               for tensor, member in zip(tensors, names)]
    return register(members, finish=lambda hs: [take_output(h, t) for h, t in zip(hs, tensors)])


def barrier(process_set=global_process_set) -> None:
    """A function that acts as a simple sychronization point for ranks specified in the given
    process set (default: every rank). Returns once every rank of the set has reached it."""
    synchronize(register([enqueue(OP_BARRIER, auto_name("barrier", None, process_set), None,
                                  process_set=process_set)]))


def join(device=-1) -> int:
    """A function that indicates that the rank finished processing data.

    All ranks that did not call join() continue to process allreduce operations. This function
    blocks Python thread until all ranks join.

    Arguments:
        device: An id of the device to create temprorary zero tensors (default -1, CPU)

    Returns:
        Id of the rank that joined last.
    """
    member = enqueue(OP_JOIN, auto_name("join", None), None)
    return synchronize(register([member], finish=lambda hs: int(_core.int_result(hs[0]))))
