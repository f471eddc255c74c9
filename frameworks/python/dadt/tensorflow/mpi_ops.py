"""Collectives on tf.Tensor and tf.Variable, eager and inside tf.function, with gradients.

How a collective runs:

* eagerly, the tensor's CPU buffer is read as a NumPy array (no copy) and handed to the runtime
  through dadt.common.array_ops; the result becomes a new tf.Tensor;
* inside a graph (tf.function, tf.compat.v1 Session.run), as three ops: a ``tf.numpy_function``
  that submits, ``DadtAwait`` (a TensorFlow asynchronous kernel that waits without holding a
  TensorFlow thread) and a ``tf.numpy_function`` that takes the result
  (dadt/tensorflow/graph_ops.py).
  Names (generated when None) are fixed when the graph is built, identically on every rank.

Gradients follow Horovod: allreduce's gradient is an allreduce, allgather's is this rank's
slice of an averaged gradient, broadcast's is an average that only root rank keeps (every rank
computes it), alltoall's is the reverse alltoall and reducescatter's is an allgather (times the
number of processes for Sum).

Errors are TensorFlow's classes in both modes (dadt/tensorflow/errors.py): a mismatch across
ranks raises tf.errors.FailedPreconditionError, bad input tf.errors.InvalidArgumentError.
"""

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from dadt.common import array_ops, dlpack
from dadt.common.basics import rank
from dadt.common.process_sets import (check_registered, global_process_set, set_id, set_rank,
                                     set_size)
from dadt.common.util import (Adasum, Average, Max, Min, Product, Sum,
                              handle_average_backwards_compatibility)
from dadt.tensorflow import graph_ops
from dadt.tensorflow.compression import Compression
from dadt.tensorflow.errors import to_tf_error

__all__ = ["Average", "Sum", "Adasum", "Min", "Max", "Product", "allreduce", "grouped_allreduce",
           "allgather", "grouped_allgather", "broadcast", "broadcast_", "alltoall",
           "reducescatter", "grouped_reducescatter", "barrier", "join"]


try:  # whether a GradientTape is active (TensorFlow's own check; private, so guarded)
    from tensorflow.python.eager.record import could_possibly_record as _could_record
except ImportError:  # pragma: no cover - depends on the TensorFlow version
    def _could_record() -> bool:
        return True


def _as_tensor(tensor: Any, name: str) -> tf.Tensor:
    if not isinstance(tensor, tf.Tensor):  # a tf.Variable is read here; gradients flow through
        tensor = tf.convert_to_tensor(tensor)
    if tensor.dtype != tensor.dtype.base_dtype:  # a TF1 RefVariable's value: read it
        tensor = tf.identity(tensor)
    if tensor.dtype.name not in dlpack.SUPPORTED_DTYPE_NAMES:
        raise ValueError("tensor '%s' has dtype %s, which dadt does not support; use one of %s"
                         % (name, tensor.dtype.name, ", ".join(dlpack.SUPPORTED_DTYPE_NAMES)))
    return tensor


def _host_array(t: tf.Tensor) -> np.ndarray:
    """The eager tensor's CPU buffer as a NumPy array (a view, no copy, except for scalars:
    TensorFlow hands 0-d bfloat16 tensors out as NumPy scalars)."""
    return np.asarray(t) if t.shape.rank else np.asarray(t.numpy())


def _to_tensor(array: np.ndarray) -> tf.Tensor:
    """A tf.Tensor over the result's memory through DLPack when it is aligned as TensorFlow's
    kernels require (no copy, and measurably cheaper right after a blocking collective than
    tf.convert_to_tensor), else a copy."""
    if dlpack.is_aligned(array) and array.size:
        return tf.experimental.dlpack.from_dlpack(dlpack.export(array))
    return tf.convert_to_tensor(array)


def _run(submit: Callable[..., int], result: Callable[[Any], List[np.ndarray]],
         names: Sequence[str], inputs: Sequence[tf.Tensor], dtypes: Sequence[tf.DType],
         shapes: Sequence[tf.TensorShape], ps) -> List[tf.Tensor]:
    """Runs one collective on ``inputs`` over process set ``ps``: ``submit`` (NumPy arrays ->
    array_ops handle) enqueues it, ``result`` turns array_ops.synchronize's value into the list of
    output arrays. Eagerly it runs now; inside a graph it becomes submit -> await -> take
    (graph_ops), and a set the runtime does not know is a ValueError now, as Horovod's ops raise
    it, rather than a failed Session.run later. ``names`` are the collective's runtime names."""
    if tf.executing_eagerly():
        try:
            value = array_ops.synchronize(submit(*[_host_array(t) for t in inputs]))
        except Exception as e:  # noqa: BLE001 - re-raised as its tf.errors class
            raise to_tf_error(e) from None
        return [_to_tensor(out) for out in result(value)]
    check_registered(ps)
    return graph_ops.run(submit, result, names, inputs, dtypes, shapes)


def _differentiable(forward: Callable[..., Any], backward: Callable[..., Any], *xs: tf.Tensor):
    """forward(*xs), with ``backward`` (upstream gradients -> input gradients) as its gradient.
    Eagerly with no GradientTape active there is nothing to record, and the call skips
    tf.custom_gradient's bookkeeping (several TensorFlow ops per call)."""
    if tf.executing_eagerly() and not _could_record():
        return forward(*xs)

    @tf.custom_gradient
    def op(*args):
        return forward(*args), backward
    return op(*xs)


def _rows_unknown(shape: tf.TensorShape) -> tf.TensorShape:
    return tf.TensorShape([None]).concatenate(shape[1:]) if shape.rank else shape


def _check_differentiable(op: int) -> None:
    if op not in (Average, Sum):
        raise NotImplementedError("the gradient of an allreduce is defined for op=Average and "
                                  "op=Sum only, not for Min, Max or Product")


# ----------------------------------------------------------------------------------------------
# allreduce and grouped allreduce
# ----------------------------------------------------------------------------------------------

def _grouped(tensors: List[tf.Tensor], name: Optional[str], op: int, prescale: float,
             postscale: float, ps) -> List[tf.Tensor]:
    base = array_ops.make_name("grouped_allreduce", name, ps)

    def forward(*xs):
        return _run(lambda *a: array_ops.grouped_allreduce_async(a, base, op, prescale, postscale,
                                                                 ps),
                    list, ["%s.%d" % (base, i) for i in range(len(xs))],
                    xs, [x.dtype for x in xs], [x.shape for x in xs], ps)

    def backward(*dys):
        _check_differentiable(op)
        return _grouped([tf.convert_to_tensor(d) for d in dys], None, op, prescale, postscale, ps)
    return list(_differentiable(forward, backward, *tensors))


def _allreduce(tensor: tf.Tensor, name: Optional[str], op: int, prescale: float,
               postscale: float, ps=None) -> tf.Tensor:
    name = array_ops.make_name("allreduce", name, ps)

    def forward(x):
        return _run(lambda a: array_ops.allreduce_async(a, name, op, prescale, postscale, ps),
                    lambda r: [r], [name], [x], [x.dtype], [x.shape], ps)[0]

    def backward(dy):
        _check_differentiable(op)
        return _allreduce(tf.convert_to_tensor(dy), None, op, prescale, postscale, ps)
    return _differentiable(forward, backward, tensor)


def _check_sparse(op: int, prescale: float, postscale: float) -> None:
    """What Horovod refuses for a tf.IndexedSlices, before anything is sent."""
    if op not in (Average, Sum):
        raise NotImplementedError("a tf.IndexedSlices is reduced with op=Average or op=Sum (its "
                                  "rows are allgathered), not op=%r" % (op,))
    if prescale != 1.0 or postscale != 1.0:
        raise NotImplementedError("prescale_factor and postscale_factor are not supported with "
                                  "tf.IndexedSlices (as in Horovod); scale the values, or pass "
                                  "the tensor dense")


def _average_rows(values: tf.Tensor, n: int) -> tf.Tensor:
    """Allgathered rows divided by the number of processes, as Horovod does: TensorFlow's true
    division, so that integer values come back as floats (float32 for 8- and 16-bit integers,
    float64 for wider ones: uint8 [4, 6] over 2 ranks is float32 [2, 3]), never truncated."""
    if values.dtype.is_integer:
        values = tf.cast(values, tf.float32 if values.dtype.size <= 2 else tf.float64)
    return values / tf.cast(n, values.dtype)


def _sparse_allreduce(slices: tf.IndexedSlices, name: Optional[str], op: int,
                      ps=None) -> tf.IndexedSlices:
    """Horovod's reduction of a sparse gradient: every rank's rows (values and indices) are
    allgathered; rows that repeat are summed when the slices are applied. Average divides the
    values by the number of processes (`_average_rows`). The caller has run `_check_sparse`."""
    base = array_ops.make_name("allreduce", name, ps)
    values = allgather(slices.values, name=base + ".values", process_set=ps)
    indices = allgather(slices.indices, name=base + ".indices", process_set=ps)
    if op == Average:
        values = _average_rows(values, set_size(ps))
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set):
    """Reduces a tensor over all dadt processes; the input is not modified.

    The reduction is keyed by ``name`` (generated when None); every rank must submit a tensor of
    the same dtype and shape under it. Differentiable: the gradient is an allreduce with the same
    op (Average or Sum).

    Arguments:
        tensor: a tf.Tensor, tf.Variable or tf.IndexedSlices (whose values and indices are
            allgathered, as Horovod does; the result is a tf.IndexedSlices, whose values op=Average
            divides as TensorFlow's ``/`` does: integer values come back as floats).
        average: deprecated; use ``op``.
        device_dense, device_sparse: accepted for Horovod compatibility; CPU only.
        compression: Compression.none or Compression.fp16 (floats travel as float16).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor, postscale_factor: multiply the input before / the result after (not
            with a tf.IndexedSlices: NotImplementedError, as Horovod).
        name: the collective's name.
        process_set: the process set whose ranks take part (default: every rank); Average
            divides by its size.

    Returns:
        A tensor of the same shape and dtype, reduced across all processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    set_id(process_set)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse(op, prescale_factor, postscale_factor)
        return _sparse_allreduce(tensor, name, op, process_set)
    t = _as_tensor(tensor, name or "allreduce")
    compressed, ctx = compression.compress(t)
    return compression.decompress(_allreduce(compressed, name, op, prescale_factor,
                                             postscale_factor, process_set), ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None,
                      process_set=global_process_set) -> List[Any]:
    """Reduces a list of tensors as one fused collective (members are named ``'<name>.<i>'``).
    Arguments are those of `allreduce`; returns the list of reduced tensors. tf.IndexedSlices
    members are allgathered (see `allreduce`), the dense ones reduced together."""
    op = handle_average_backwards_compatibility(op, average)
    set_id(process_set)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped allreduce needs at least one tensor")
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        _check_sparse(op, prescale_factor, postscale_factor)
    base = array_ops.make_name("grouped_allreduce", name, process_set)
    out: List[Any] = [None] * len(tensors)
    dense = []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _sparse_allreduce(t, "%s.sparse.%d" % (base, i), op, process_set)
        else:
            dense.append(i)
    if dense:
        ts = [_as_tensor(tensors[i], "%s.%d" % (base, i)) for i in dense]
        pairs = [compression.compress(t) for t in ts]
        reduced = _grouped([c for c, _ in pairs], base, op, prescale_factor, postscale_factor,
                           process_set)
        for i, r, (_, ctx) in zip(dense, reduced, pairs):
            out[i] = compression.decompress(r, ctx)
    return out


# ----------------------------------------------------------------------------------------------
# allgather, broadcast, alltoall, reducescatter
# ----------------------------------------------------------------------------------------------

def _allgather_backward(x: tf.Tensor, dy: tf.Tensor, ps=None) -> tf.Tensor:
    """This rank's rows of the averaged gradient of an allgather of ``x`` over set ``ps``."""
    reduced = _allreduce(tf.convert_to_tensor(dy), None, Average, 1.0, 1.0, ps)
    if not x.shape.rank:
        return reduced[set_rank(ps)]
    rows = tf.shape(x, out_type=tf.int64)[:1]
    counts = allgather(rows, process_set=ps)
    start = tf.reduce_sum(counts[:set_rank(ps)])
    return reduced[start:start + rows[0]]


def allgather(tensor, name=None, process_set=global_process_set) -> tf.Tensor:
    """Concatenates the tensor of every process (of ``process_set``, by rank within it) on the
    first dimension (which may differ across ranks; the other dimensions must match).
    Differentiable: the gradient is this rank's rows of the averaged incoming gradient."""
    name = array_ops.make_name("allgather", name, process_set)
    t = _as_tensor(tensor, name)
    ps = process_set
    set_id(ps)

    def forward(x):
        return _run(lambda a: array_ops.allgather_async(a, name, ps), lambda r: [r], [name], [x],
                    [x.dtype], [_rows_unknown(x.shape)], ps)[0]
    return _differentiable(forward, lambda dy: _allgather_backward(t, dy, ps), t)


def grouped_allgather(tensors, name=None, process_set=global_process_set) -> List[tf.Tensor]:
    """Allgathers a list of tensors in one step (members are named ``'<name>.<i>'``); each
    result is that of `allgather`. Differentiable."""
    base = array_ops.make_name("grouped_allgather", name, process_set)
    ts = [_as_tensor(t, "%s.%d" % (base, i)) for i, t in enumerate(tensors)]
    if not ts:
        raise ValueError("grouped allgather needs at least one tensor")

    def forward(*xs):
        return _run(lambda *a: array_ops.grouped_allgather_async(a, base, process_set), list,
                    ["%s.%d" % (base, i) for i in range(len(xs))], xs, [x.dtype for x in xs],
                    [_rows_unknown(x.shape) for x in xs], process_set)

    def backward(*dys):
        return [_allgather_backward(x, dy, process_set) for x, dy in zip(ts, dys)]
    return list(_differentiable(forward, backward, *ts))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set) -> tf.Tensor:
    """Returns root rank's value of the tensor on every process (of ``process_set``; root_rank is
    a global rank, a member); the input is not modified.
    Differentiable: root rank receives the average of every rank's gradient, others zero (every
    rank takes part in the averaging, so that the collective completes)."""
    name = array_ops.make_name("broadcast", name, process_set)

    def forward(x):
        return _run(lambda a: array_ops.broadcast_async(a, root_rank, name, process_set),
                    lambda r: [r],
                    [name], [x], [x.dtype], [x.shape], process_set)[0]

    def backward(dy):
        reduced = _allreduce(tf.convert_to_tensor(dy), None, Average, 1.0, 1.0, process_set)
        if rank() == root_rank:
            return reduced
        # The zeros depend on the allreduce: without it a graph would prune the allreduce on
        # the non-root ranks and root rank would wait for it forever.
        with tf.control_dependencies([reduced]):
            return tf.identity(tf.zeros_like(dy))
    return _differentiable(forward, backward, _as_tensor(tensor, name))


def broadcast_(variables, root_rank, name=None):
    """Assigns root rank's value to each variable in place (Horovod's ``broadcast_``); returns the
    variables (a list when given a list or tuple, else the one variable)."""
    from dadt.tensorflow.functions import broadcast_variables
    single = not isinstance(variables, (list, tuple))
    items = [variables] if single else list(variables)
    op = broadcast_variables(items, root_rank, name=name)
    if op is not None:  # graph mode: the results are read after the assignments
        with tf.control_dependencies([op]):
            items = [tf.identity(v) for v in items]
    return items[0] if single else items


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[i]`` rows of the tensor to rank i (equal parts when None) and returns the
    rows received, in rank order; with ``splits`` given, returns (output, received_splits).
    Differentiable: the gradient is the reverse alltoall. Invalid splits raise
    tf.errors.InvalidArgumentError. With ``process_set``, ``splits`` has one entry per member."""
    name = array_ops.make_name("alltoall", name, process_set)
    split_list = None if splits is None else tf.convert_to_tensor(splits, dtype=tf.int32)
    received = []

    def forward(x):
        def submit(a, *s):
            return array_ops.alltoall_async(a, s[0] if s else None, name, process_set)
        inputs = [x] if split_list is None else [x, split_list]
        out, got = _run(submit, list, [name], inputs, [x.dtype, tf.int32],
                        [_rows_unknown(x.shape), tf.TensorShape([None])], process_set)
        received.append(got)
        return out

    def backward(dy):
        back, _ = alltoall(tf.convert_to_tensor(dy), splits=received[0], process_set=process_set)
        return back
    out = _differentiable(forward, backward, _as_tensor(tensor, name))
    return out if splits is None else (out, received[0])


def _reducescatter_scale(op: int, prescale: float, postscale: float, ps) -> float:
    # Horovod's gradient: allgather(dy), times the number of processes of the set for Sum.
    return prescale * postscale * (set_size(ps) if op == Sum else 1)


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=global_process_set):
    """Reduces the tensor over all processes and returns this rank's block of rows (lower ranks
    get one more row when the first dimension does not divide evenly). Differentiable: the
    gradient is an allgather (times the number of processes for op=Sum, as Horovod's)."""
    name = array_ops.make_name("reducescatter", name, process_set)
    scale = _reducescatter_scale(op, prescale_factor, postscale_factor, process_set)

    def forward(x):
        return _run(lambda a: array_ops.reducescatter_async(a, name, op, prescale_factor,
                                                            postscale_factor, process_set),
                    lambda r: [r], [name], [x], [x.dtype], [_rows_unknown(x.shape)],
                    process_set)[0]

    def backward(dy):
        gathered = allgather(tf.convert_to_tensor(dy), process_set=process_set)
        return gathered * tf.cast(scale, gathered.dtype) if scale != 1 else gathered
    return _differentiable(forward, backward, _as_tensor(tensor, name))


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=global_process_set) -> List[tf.Tensor]:
    """Reducescatters a list of tensors in one step (members are named ``'<name>.<i>'``); each
    result is that of `reducescatter`. Differentiable."""
    base = array_ops.make_name("grouped_reducescatter", name, process_set)
    ts = [_as_tensor(t, "%s.%d" % (base, i)) for i, t in enumerate(tensors)]
    if not ts:
        raise ValueError("grouped reducescatter needs at least one tensor")
    scale = _reducescatter_scale(op, prescale_factor, postscale_factor, process_set)

    def forward(*xs):
        return _run(lambda *a: array_ops.grouped_reducescatter_async(
            a, base, op, prescale_factor, postscale_factor, process_set), list,
            ["%s.%d" % (base, i) for i in range(len(xs))], xs, [x.dtype for x in xs],
            [_rows_unknown(x.shape) for x in xs], process_set)

    def backward(*dys):
        gathered = grouped_allgather([tf.convert_to_tensor(d) for d in dys],
                                     process_set=process_set)
        return [g * tf.cast(scale, g.dtype) if scale != 1 else g for g in gathered]
    return list(_differentiable(forward, backward, *ts))


def barrier(process_set=global_process_set) -> None:
    """Returns once every process of ``process_set`` (default: every rank) has reached it (eager
    only)."""
    array_ops.barrier(process_set)


def join() -> int:
    """Marks this rank as out of data and waits for every rank to join; returns the rank that
    joined last (eager only)."""
    return array_ops.join()
