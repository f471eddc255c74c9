"""Collectives on tf.Tensor and tf.Variable, eager and inside tf.function, with gradients.

How a collective runs:

* eagerly, the tensor's CPU buffer is read as a NumPy array (no copy) and handed to the runtime
  through dadt.common.array_ops; the result becomes a new tf.Tensor;
* inside a tf.function (graph mode), the same Python code runs as a ``tf.numpy_function`` op
  marked stateful. No custom TensorFlow kernel is compiled, so one build of dadt serves every
  TensorFlow version; tf.function's automatic control dependencies run stateful ops in program
  order, so every rank submits its collectives in the order they were written. Names (generated
  when None) are fixed when the function is traced, identically on every rank.

Gradients follow Horovod: allreduce's gradient is an allreduce, allgather's is this rank's
slice of an averaged gradient, broadcast's is an average that only root rank keeps, alltoall's
is the reverse alltoall and reducescatter's is an allgather.

In graph mode an error (a mismatch across ranks, say) reaches the caller as a
``tf.errors.OpError`` carrying dadt's message; eagerly it is dadt's own exception type.
"""

from typing import Any, Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from dadt.common import array_ops, dlpack
from dadt.common.basics import rank, size
from dadt.common.util import (Adasum, Average, Max, Min, Product, Sum,
                              handle_average_backwards_compatibility)
from dadt.tensorflow.compression import Compression

__all__ = ["Average", "Sum", "Adasum", "Min", "Max", "Product", "allreduce", "grouped_allreduce",
           "allgather", "broadcast", "alltoall", "reducescatter", "barrier", "join"]


try:  # whether a GradientTape is active (TensorFlow's own check; private, so guarded)
    from tensorflow.python.eager.record import could_possibly_record as _could_record
except ImportError:  # pragma: no cover - depends on the TensorFlow version
    def _could_record() -> bool:
        return True


def _as_tensor(tensor: Any, name: str) -> tf.Tensor:
    if not isinstance(tensor, tf.Tensor):  # a tf.Variable is read here; gradients flow through
        tensor = tf.convert_to_tensor(tensor)
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


def _run(fn: Callable[..., List[np.ndarray]], inputs: Sequence[tf.Tensor],
         dtypes: Sequence[tf.DType], shapes: Sequence[tf.TensorShape]) -> List[tf.Tensor]:
    """Runs ``fn`` (NumPy arrays in, a list of NumPy arrays out) on ``inputs``: directly when
    executing eagerly, as a stateful tf.numpy_function inside a graph."""
    if tf.executing_eagerly():
        return [_to_tensor(out) for out in fn(*[_host_array(t) for t in inputs])]
    outs = tf.numpy_function(lambda *arrays: fn(*arrays), list(inputs), list(dtypes),
                             stateful=True, name="dadt")
    for out, shape in zip(outs, shapes):
        out.set_shape(shape)
    return list(outs)


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
             postscale: float) -> List[tf.Tensor]:
    base = array_ops.make_name("grouped_allreduce", name)

    def forward(*xs):
        return _run(lambda *a: array_ops.grouped_allreduce(a, base, op, prescale, postscale),
                    xs, [x.dtype for x in xs], [x.shape for x in xs])

    def backward(*dys):
        _check_differentiable(op)
        return _grouped([tf.convert_to_tensor(d) for d in dys], None, op, prescale, postscale)
    return list(_differentiable(forward, backward, *tensors))


def _allreduce(tensor: tf.Tensor, name: Optional[str], op: int, prescale: float,
               postscale: float) -> tf.Tensor:
    name = array_ops.make_name("allreduce", name)

    def forward(x):
        return _run(lambda a: [array_ops.allreduce(a, name, op, prescale, postscale)], [x],
                    [x.dtype], [x.shape])[0]

    def backward(dy):
        _check_differentiable(op)
        return _allreduce(tf.convert_to_tensor(dy), None, op, prescale, postscale)
    return _differentiable(forward, backward, tensor)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None) -> tf.Tensor:
    """Reduces a tensor over all dadt processes; the input is not modified.

    The reduction is keyed by ``name`` (generated when None); every rank must submit a tensor of
    the same dtype and shape under it. Differentiable: the gradient is an allreduce with the same
    op (Average or Sum).

    Arguments:
        tensor: a tf.Tensor, tf.Variable or tf.IndexedSlices (reduced dense).
        average: deprecated; use ``op``.
        device_dense, device_sparse: accepted for Horovod compatibility; CPU only.
        compression: Compression.none or Compression.fp16 (floats travel as float16).
        op: Average (default), Sum, Min, Max or Product.
        prescale_factor, postscale_factor: multiply the input before / the result after.
        name: the collective's name.

    Returns:
        A tensor of the same shape and dtype, reduced across all processes.
    """
    op = handle_average_backwards_compatibility(op, average)
    t = _as_tensor(tensor, name or "allreduce")
    compressed, ctx = compression.compress(t)
    return compression.decompress(_allreduce(compressed, name, op, prescale_factor,
                                             postscale_factor), ctx)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None) -> List[tf.Tensor]:
    """Reduces a list of tensors as one fused collective (members are named ``'<name>.<i>'``).
    Arguments are those of `allreduce`; returns the list of reduced tensors."""
    op = handle_average_backwards_compatibility(op, average)
    ts = [_as_tensor(t, "%s.%d" % (name or "grouped_allreduce", i)) for i, t in enumerate(tensors)]
    if not ts:
        raise ValueError("grouped allreduce needs at least one tensor")
    pairs = [compression.compress(t) for t in ts]
    reduced = _grouped([c for c, _ in pairs], name, op, prescale_factor, postscale_factor)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, pairs)]


# ----------------------------------------------------------------------------------------------
# allgather, broadcast, alltoall, reducescatter
# ----------------------------------------------------------------------------------------------

def allgather(tensor, name=None) -> tf.Tensor:
    """Concatenates the tensor of every process on the first dimension (which may differ across
    ranks; the other dimensions must match). Differentiable: the gradient is this rank's rows
    of the averaged incoming gradient."""
    name = array_ops.make_name("allgather", name)
    t = _as_tensor(tensor, name)

    def forward(x):
        return _run(lambda a: [array_ops.allgather(a, name)], [x], [x.dtype],
                    [_rows_unknown(x.shape)])[0]

    def backward(dy):
        reduced = _allreduce(tf.convert_to_tensor(dy), None, Average, 1.0, 1.0)
        if not t.shape.rank:
            return reduced[rank()]
        rows = tf.shape(t, out_type=tf.int64)[:1]
        counts = allgather(rows)
        start = tf.reduce_sum(counts[:rank()])
        return reduced[start:start + rows[0]]
    return _differentiable(forward, backward, t)


def broadcast(tensor, root_rank, name=None) -> tf.Tensor:
    """Returns root rank's value of the tensor on every process; the input is not modified.
    Differentiable: root rank receives the average of every rank's gradient, others zero."""
    name = array_ops.make_name("broadcast", name)

    def forward(x):
        return _run(lambda a: [array_ops.broadcast(a, root_rank, name)], [x], [x.dtype],
                    [x.shape])[0]

    def backward(dy):
        reduced = _allreduce(tf.convert_to_tensor(dy), None, Average, 1.0, 1.0)
        return reduced if rank() == root_rank else tf.zeros_like(reduced)
    return _differentiable(forward, backward, _as_tensor(tensor, name))


def alltoall(tensor, splits=None, name=None):
    """Sends ``splits[i]`` rows of the tensor to rank i (equal parts when None) and returns the
    rows received, in rank order; with ``splits`` given, returns (output, received_splits).
    Differentiable: the gradient is the reverse alltoall."""
    name = array_ops.make_name("alltoall", name)
    split_list = None if splits is None else tf.convert_to_tensor(splits, dtype=tf.int32)
    received = []

    def forward(x):
        def fn(a, *s):
            return list(array_ops.alltoall(a, s[0] if s else None, name))
        inputs = [x] if split_list is None else [x, split_list]
        out, got = _run(fn, inputs, [x.dtype, tf.int32],
                        [_rows_unknown(x.shape), tf.TensorShape([None])])
        received.append(got)
        return out

    def backward(dy):
        back, _ = alltoall(tf.convert_to_tensor(dy), splits=received[0])
        return back
    out = _differentiable(forward, backward, _as_tensor(tensor, name))
    return out if splits is None else (out, received[0])


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces the tensor over all processes and returns this rank's block of rows (lower ranks
    get one more row when the first dimension does not divide evenly). Differentiable: the
    gradient is an allgather, scaled like the forward pass."""
    name = array_ops.make_name("reducescatter", name)
    scale = prescale_factor * postscale_factor / (size() if op == Average else 1)

    def forward(x):
        return _run(lambda a: [array_ops.reducescatter(a, name, op, prescale_factor,
                                                       postscale_factor)],
                    [x], [x.dtype], [_rows_unknown(x.shape)])[0]

    def backward(dy):
        gathered = allgather(tf.convert_to_tensor(dy))
        return gathered * tf.cast(scale, gathered.dtype) if scale != 1 else gathered
    return _differentiable(forward, backward, _as_tensor(tensor, name))


def barrier() -> None:
    """Returns once every process has reached it (eager only)."""
    array_ops.barrier()


def join() -> int:
    """Marks this rank as out of data and waits for every rank to join; returns the rank that
    joined last (eager only)."""
    return array_ops.join()
