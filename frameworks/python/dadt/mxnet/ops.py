"""Collectives on MXNet NDArrays, with Horovod's horovod.mxnet signatures.

Each NDArray reaches the runtime through DLPack: ``mx.nd.to_dlpack_for_read`` (which waits for the
array's pending writes in MXNet's engine) or ``to_dlpack_for_write`` (pending reads and writes too,
for the in-place forms) gives a capsule over the array's own memory, which
``dadt.common.dlpack.to_array`` turns into a NumPy view without a copy; dadt.common.array_ops then
runs the collective as it does for TensorFlow and JAX. A result goes back with
``mx.nd.from_dlpack`` over the output buffer (a capsule of dadt's, see ``to_mxnet``), again
without a copy; the in-place forms (``allreduce_``, ``broadcast_``, ...) write it into the
array through its write view.

Two MXNet facts shape what is accepted:
  * MXNet's DLPack export of bool says 1 bit, which no DLPack reader takes, so bool arrays are
    copied (``asnumpy``/``mx.nd.array``) instead of viewed;
  * MXNet 1.x's NDArray reads a 0 in a shape as "unknown", so it has no empty or 0-d arrays; nor
    int16/uint16. Everything else dadt reduces works: uint8, int8, int32, int64, float16,
    float32, float64, bool.

The calls are synchronous, as Horovod's are from the user's point of view (Horovod enqueues on
MXNet's engine; the result is ready when it is read). ``priority`` is accepted and ignored: the
runtime orders by negotiation, not by priority.
"""

from typing import Any, List, Optional, Sequence

import mxnet as mx
import numpy as np

from dadt.common import array_ops, dlpack
from dadt.common.process_sets import global_process_set, set_id
from dadt.common.util import Average, Sum

__all__ = ["allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_", "allgather",
           "broadcast", "broadcast_", "alltoall", "reducescatter", "barrier", "join"]


def reduce_op(average: Optional[bool], op: Optional[int]) -> int:
    """Horovod's mxnet API takes ``average`` (default True); dadt also takes ``op`` (as the
    other front ends). Both at once is an error."""
    if op is not None:
        if average is not None:
            raise ValueError("pass either op= or average=, not both (op supersedes average)")
        return op
    return Sum if average is False else Average


def _check(tensor: Any, name: str) -> None:
    if not isinstance(tensor, mx.nd.NDArray):
        raise TypeError("tensor '%s' must be an mxnet.nd.NDArray, got %s"
                        % (name, type(tensor).__name__))
    if tensor.stype != "default":
        raise ValueError("tensor '%s' has storage type %s; dadt.mxnet reduces dense NDArrays "
                         "(convert with tostype('default'))" % (name, tensor.stype))
    if not tensor.context.device_type.startswith("cpu"):  # cpu, cpu_pinned, cpu_shared
        raise ValueError("tensor '%s' is on %s; dadt.mxnet takes CPU NDArrays only"
                         % (name, tensor.context))


def _is_bool(tensor: mx.nd.NDArray) -> bool:
    return np.dtype(tensor.dtype) == np.bool_


def to_numpy(tensor: mx.nd.NDArray, name: str, write: bool = False) -> np.ndarray:
    """A NumPy array over ``tensor``'s memory (DLPack, no copy); a copy for bool. With
    ``write``, MXNet's engine first finishes every pending read and write of the array, so the
    caller may write through the view."""
    _check(tensor, name)
    if _is_bool(tensor):
        if write:
            tensor.wait_to_read()  # the result is written back with _store
        return tensor.asnumpy()
    if write:
        return dlpack.to_array(mx.nd.to_dlpack_for_write(tensor))
    return dlpack.to_array(mx.nd.to_dlpack_for_read(tensor))


def to_mxnet(array: np.ndarray, context: Optional[mx.Context] = None) -> mx.nd.NDArray:
    """An NDArray over ``array``'s memory (DLPack, no copy); a copy for bool.

    The capsule is dadt's (``dlpack.to_capsule``), not NumPy's ``__dlpack__``: MXNet frees an
    NDArray through ctypes, with the GIL released, and NumPy 1.23's DLPack deleter then drops its
    reference without the GIL (a fatal error at exit, a race before); dadt's deleter takes it."""
    if array.dtype == np.bool_:
        return mx.nd.array(array, ctx=context or mx.cpu(), dtype=np.bool_)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.ascontiguousarray(array).copy()
    capsule, _ = dlpack.to_capsule(array, writable=True)  # the capsule holds the array
    return mx.nd.from_dlpack(capsule)


def _store(tensor: mx.nd.NDArray, view: np.ndarray, result: np.ndarray) -> mx.nd.NDArray:
    """Writes ``result`` into ``tensor``, whose write view (or bool copy) is ``view``."""
    if _is_bool(tensor):
        tensor[:] = mx.nd.array(result, ctx=tensor.context, dtype=np.bool_)
    else:
        view[...] = result
    return tensor


def _names(base: str, count: int) -> List[str]:
    return ["%s.%d" % (base, i) for i in range(count)]


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, op=None):
    """Averages (default) or sums ``tensor`` over every process (of ``process_set``) and returns
    the result as a new NDArray; the input is not modified. ``op`` (Average, Sum, Min, Max,
    Product, Adasum) supersedes ``average``. Every process must pass the same shape and dtype
    under the same name (generated when None)."""
    del priority
    name = array_ops.make_name("allreduce", name, process_set)
    out = array_ops.allreduce(to_numpy(tensor, name), name, reduce_op(average, op),
                              prescale_factor, postscale_factor, process_set)
    return to_mxnet(out, tensor.context)


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, op=None):
    """``allreduce`` in place: the result is written into ``tensor``, which is returned."""
    del priority
    name = array_ops.make_name("allreduce", name, process_set)
    view = to_numpy(tensor, name, write=True)
    out = array_ops.allreduce(view, name, reduce_op(average, op), prescale_factor,
                              postscale_factor, process_set)
    return _store(tensor, view, out)


def _grouped(tensors: Sequence[Any], average, name, prescale_factor, postscale_factor,
             process_set, op, write: bool):
    tensors = list(tensors)
    base = array_ops.make_name("grouped_allreduce", name, process_set)
    views = [to_numpy(t, n, write) for t, n in zip(tensors, _names(base, len(tensors)))]
    outs = array_ops.grouped_allreduce(views, base, reduce_op(average, op), prescale_factor,
                                       postscale_factor, process_set)
    return tensors, views, outs


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """Reduces a list of NDArrays as one fused collective (members ``'<name>.<i>'``) and returns
    a list of new NDArrays. An empty list is returned as it is."""
    del priority
    if not tensors:
        return tensors
    tensors, _, outs = _grouped(tensors, average, name, prescale_factor, postscale_factor,
                                process_set, op, write=False)
    return [to_mxnet(o, t.context) for t, o in zip(tensors, outs)]


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """``grouped_allreduce`` in place: each result is written into its input; returns the
    inputs."""
    del priority
    if not tensors:
        return tensors
    tensors, views, outs = _grouped(tensors, average, name, prescale_factor, postscale_factor,
                                    process_set, op, write=True)
    for t, v, o in zip(tensors, views, outs):
        _store(t, v, o)
    return tensors


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates every process's ``tensor`` on the first dimension (which may differ across
    processes) into a new NDArray."""
    del priority
    name = array_ops.make_name("allgather", name, process_set)
    out = array_ops.allgather(to_numpy(tensor, name), name, process_set)
    return to_mxnet(out, tensor.context)


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """Returns root rank's ``tensor`` on every process, as a new NDArray (``root_rank`` is a
    global rank, a member of ``process_set``)."""
    del priority
    name = array_ops.make_name("broadcast", name, process_set)
    out = array_ops.broadcast(to_numpy(tensor, name), root_rank, name, process_set)
    return to_mxnet(out, tensor.context)


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """``broadcast`` in place: root rank's value is written into ``tensor``; returns it."""
    del priority
    name = array_ops.make_name("broadcast", name, process_set)
    view = to_numpy(tensor, name, write=True)
    return _store(tensor, view, array_ops.broadcast(view, root_rank, name, process_set))


def broadcast_many_(tensors: Sequence[mx.nd.NDArray], names: Sequence[str], root_rank: int,
                    process_set=global_process_set) -> None:
    """Broadcasts several NDArrays in place, all in flight at once (broadcast_parameters)."""
    views = [to_numpy(t, n, write=True) for t, n in zip(tensors, names)]
    handles = [array_ops.broadcast_async(v, root_rank, n, process_set)
               for v, n in zip(views, names)]
    failure = None
    for t, v, h in zip(tensors, views, handles):
        try:  # every handle is waited for, so no collective still writes a view
            _store(t, v, array_ops.synchronize(h))
        except Exception as e:  # noqa: BLE001 - re-raised below, the first one
            failure = failure or e
    if failure is not None:
        raise failure


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` to process i (equal parts when None) and returns
    the rows received, in rank order; with ``splits``, returns ``(output, received_splits)``
    (an int32 NDArray), as Horovod."""
    del priority
    name = array_ops.make_name("alltoall", name, process_set)
    if isinstance(splits, mx.nd.NDArray):
        splits = splits.asnumpy()
    out, received = array_ops.alltoall(to_numpy(tensor, name), splits, name, process_set)
    out = to_mxnet(out, tensor.context)
    return out if splits is None else (out, to_mxnet(received))


def reducescatter(tensor, name=None, priority=0, op=Average, prescale_factor=1.0,
                  postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` over every process and returns this process's block of rows (lower
    ranks get one more row when the first dimension does not divide evenly). Not in Horovod's
    mxnet API; as dadt.torch's."""
    del priority
    name = array_ops.make_name("reducescatter", name, process_set)
    out = array_ops.reducescatter(to_numpy(tensor, name), name, op, prescale_factor,
                                  postscale_factor, process_set)
    return to_mxnet(out, tensor.context)


def barrier(process_set=global_process_set) -> None:
    """Returns once every process (of ``process_set``) has reached it."""
    set_id(process_set)
    array_ops.barrier(process_set)


def join() -> int:
    """Marks this process as out of data and waits for every process; returns the last to
    join."""
    return array_ops.join()
