"""Synchronous collectives on torch tensors, differentiable as in Horovod.

Each function blocks until the collective completes and returns a new tensor; gradients flow
through them (allreduce's gradient is an allreduce, allgather's a slice of an allreduce, and so
on), so they can sit inside a model's forward pass. The asynchronous and in-place forms are in
``dadt.torch.async_collectives``.
"""

import torch

from dadt.common.process_sets import global_process_set, set_rank, set_size
from dadt.common.basics import rank as global_rank
from dadt.common.util import Average, Sum, handle_average_backwards_compatibility
from dadt.torch import async_collectives
from dadt.torch.compression import Compression
from dadt.torch.handles import synchronize

__all__ = ["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
           "alltoall", "reducescatter", "grouped_reducescatter"]


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return synchronize(async_collectives.allreduce_async(tensor, name=name, op=op,
                                                   prescale_factor=prescale_factor,
                                                   postscale_factor=postscale_factor,
                                                   process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output.contiguous(), op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set) -> torch.Tensor:
    """A function that performs averaging or summation of the input tensor over all the dadt
    processes. The input tensor is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all dadt
    processes for a given name. The reduction will not start until all processes are ready to
    send and receive the tensor.

    This acts as a thin wrapper around an autograd function. If your input tensor requires
    gradients, then calling this function will allow gradients to be computed and
    backpropagated.

    Arguments:
        tensor: A tensor to reduce.
        average:
            .. warning:: .. deprecated:: 0.19.0

                Use `op` instead. Will be removed in v1.0.

        name: A name of the reduction operation.
        compression: Compression algorithm used during allreduce to reduce the amount of data
            sent during each parameter update step. Defaults to not using compression.
        op: The reduction operation to combine tensors across different ranks. Defaults to
            Average if None is given.
        prescale_factor: Multiplicative factor to scale tensor before allreduce.
        postscale_factor: Multiplicative factor to scale tensor after allreduce.
        process_set: Process set whose ranks take part (default: every rank); Average divides
            by its size.

    Returns:
        A tensor of the same shape and type as `tensor`, averaged or summed across all processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    tensor_compressed, ctx = compression.compress(tensor)
    summed = _Allreduce.apply(tensor_compressed, name, op, prescale_factor, postscale_factor,
                              process_set)
    return compression.decompress(summed, ctx)


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(async_collectives.grouped_allreduce_async(
            list(tensors), name=name, op=op, prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A function that performs averaging or summation of the input tensor list over all the
    dadt processes. The input tensors are not modified. The members are reduced together and
    named ``'<name>.<i>'``; gradients flow as for `allreduce()`.

    Arguments are those of `allreduce()`, with a list of tensors in place of one tensor.

    Returns:
        A list containing tensors of the same shape and type as in `tensors`, averaged or summed
        across all processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    summed = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set,
                                     *compressed)
    return [compression.decompress(t, ctx) for t, ctx in zip(summed, ctxs)]


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set = process_set
        return synchronize(async_collectives.allgather_async(tensor, name,
                                                             process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        ps = ctx.process_set
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64), process_set=ps)
        offset = int(dims[:set_rank(ps)].sum())
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set) -> torch.Tensor:
    """A function that concatenates the input tensor with the same input tensor on all other dadt
    processes. The input tensor is not modified.

    The concatenation is done on the first dimension, so the input tensors on the different
    processes must have the same rank and shape, except for the first dimension, which is allowed
    to be different.

    This acts as a thin wrapper around an autograd function. If your input tensor requires
    gradients, then calling this function will allow gradients to be computed and
    backpropagated.

    Arguments:
        tensor: A tensor to allgather.
        name: A name of the allgather operation.
        process_set: Process set whose ranks take part (default: every rank); blocks are
            ordered by rank within the set.

    Returns:
        A tensor of the same type as `tensor`, concatenated on dimension zero across all
        processes. The shape is identical to the input shape, except for the first dimension,
        which may be greater and is the sum of all first dimensions of the tensors in different
        dadt processes.
    """
    return _Allgather.apply(tensor, name, process_set)


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() > 0 else 1 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(async_collectives.grouped_allgather_async(
            list(tensors), name, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        # As allgather's: the average over ranks of each gathered gradient, this rank's rows.
        ps = ctx.process_set
        grads = grouped_allreduce([g.contiguous() for g in grad_outputs], op=Average,
                                  process_set=ps)
        dims = allgather(torch.tensor([ctx.dims], dtype=torch.int64), process_set=ps)
        offsets = dims[:set_rank(ps)].sum(dim=0).tolist()  # ranks x members
        return (None, None) + tuple(g.narrow(0, int(o), d)
                                    for g, o, d in zip(grads, offsets, ctx.dims))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors, negotiated together (members named ``'<name>.<i>'``);
    gradients flow as for `allgather()`.

    Returns:
        A list of tensors, each as `allgather()` returns it for the member.
    """
    return list(_GroupedAllgather.apply(name, process_set, *tensors))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(async_collectives.broadcast_async(tensor, root_rank, name,
                                                             process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output.contiguous(), op=Average, process_set=ctx.process_set)
        if global_rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set) -> torch.Tensor:
    """A function that broadcasts the input tensor on root rank to the same input tensor on all
    other dadt processes. The input tensor is not modified.

    The broadcast operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all dadt
    processes for a given name. The broadcast will not start until all processes are ready to
    send and receive the tensor.

    This acts as a thin wrapper around an autograd function. If your input tensor requires
    gradients, then calling this function will allow gradients to be computed and
    backpropagated.

    Arguments:
        tensor: A tensor to broadcast.
        root_rank: The rank to broadcast the value from (a global rank, a member of
            `process_set`).
        name: A name of the broadcast operation.
        process_set: Process set whose ranks take part (default: every rank).

    Returns:
        A tensor of the same shape and type as `tensor`, with the value broadcasted from root
        rank.
    """
    return _Broadcast.apply(tensor, root_rank, name, process_set)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(async_collectives.alltoall_async(
            tensor, splits, name, process_set=process_set))
        ctx.received_splits, ctx.process_set = received_splits, process_set
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, grad_received_splits):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received_splits,
                           process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """A function that scatters slices of the input tensor to all other dadt processes and
    returns a tensor of gathered slices from all other dadt processes. The input tensor is not
    modified.

    The slicing is done on the first dimension, so the input tensors on the different processes
    must have the same rank and shape, except for the first dimension, which is allowed to be
    different.

    This acts as a thin wrapper around an autograd function. If your input tensor requires
    gradients, then calling this function will allow gradients to be computed and
    backpropagated.

    Arguments:
        tensor: A tensor to distribute with alltoall.
        splits: A tensor of integers in rank order describing how many elements in `tensor` to
            send to each worker. Splitting is applied along the first dimension of `tensor`. If
            `splits` is not provided, the first dimension is split equally by the number of dadt
            processes.
        name: A name of the alltoall operation.
        process_set: Process set whose ranks take part (default: every rank); `splits` then has
            one entry per member, in rank order within the set.

    Returns:
        1) A tensor containing the gathered tensor data from all workers.
        2) If `splits` has been provided: A tensor of integers in rank order describing how many
           elements in the output tensor have been received from each worker.
    """
    output, received_splits = _Alltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received_splits)


def _reducescatter_grad_scale(op, prescale_factor, postscale_factor, process_set):
    """Horovod's reducescatter gradient: the allgathered gradient times the scale factors, and
    times the number of ranks of the process set for Sum (for Average, not divided by it)."""
    return prescale_factor * postscale_factor * (set_size(process_set) if op == Sum else 1)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.scale = _reducescatter_grad_scale(op, prescale_factor, postscale_factor, process_set)
        ctx.process_set = process_set
        return synchronize(async_collectives.reducescatter_async(
            tensor, name, op, prescale_factor, postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(grad_output.contiguous(), process_set=ctx.process_set)
        if ctx.scale != 1:
            grad = grad * ctx.scale
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  compression=Compression.none, process_set=global_process_set) -> torch.Tensor:
    """A function that performs reduction of the input tensor over all the dadt processes, then
    scatters the results across all dadt processes. The input tensor is not modified.

    The reduction operation is keyed by the name. If name is not provided, an incremented
    auto-generated name is used. The tensor type and shape must be the same on all dadt
    processes for a given name. The reduction will not start until all processes are ready to
    send and receive the tensor.

    This acts as a thin wrapper around an autograd function. If your input tensor requires
    gradients, then calling this function will allow gradients to be computed and
    backpropagated.

    Arguments:
        tensor: A tensor to average/sum and scatter.
        name: A name of the reduce operation.
        op: The reduction operation to combine tensors across different ranks. Defaults to
            Average.
        prescale_factor: Multiplicative factor to scale tensor before reducescatter.
        postscale_factor: Multiplicative factor to scale tensor after reducescatter.
        compression: Compression algorithm used to reduce the amount of data sent.
        process_set: Process set whose ranks take part (default: every rank); the rows are
            split over its members.

    Returns:
        A tensor of the same rank and type as `tensor`, whose first dimension is this rank's
        share of the input's first dimension; averaged or summed across all processes.
    """
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = _Reducescatter.apply(tensor_compressed, name, op, prescale_factor, postscale_factor,
                                   process_set)
    return compression.decompress(reduced, ctx)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.scale = _reducescatter_grad_scale(op, prescale_factor, postscale_factor, process_set)
        ctx.process_set = process_set
        return tuple(synchronize(async_collectives.grouped_reducescatter_async(
            list(tensors), name, op, prescale_factor, postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allgather([g.contiguous() for g in grad_outputs],
                                  process_set=ctx.process_set)
        if ctx.scale != 1:
            grads = [g * ctx.scale for g in grads]
        return (None, None, None, None, None) + tuple(grads)


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set):
    """Reducescatters a list of tensors, negotiated together (members named ``'<name>.<i>'``);
    gradients flow as for `reducescatter()`.

    Returns:
        A list of tensors, each this rank's share of the member, reduced across all processes.
    """
    return list(_GroupedReducescatter.apply(name, op, prescale_factor, postscale_factor,
                                            process_set, *tensors))
