"""Training helpers for TensorFlow 2: DistributedGradientTape, broadcast_variables and objects.

``broadcast_variables`` is the TF2 replacement of DADT's TF1 ``BroadcastTrainableVariablesHook``
(and of Horovod's ``BroadcastGlobalVariablesHook``): call it once after the variables exist
(after the first step for optimizer slots), or use dadt.keras.callbacks with model.fit.
"""

from typing import Any, List, Optional

import tensorflow as tf

from dadt.common import array_ops
from dadt.common.basics import size
from dadt.common.util import Average, Sum
from dadt.tensorflow.compression import Compression
from dadt.tensorflow.errors import to_tf_error
from dadt.tensorflow.mpi_ops import broadcast, grouped_allreduce

__all__ = ["broadcast_variables", "broadcast_object", "allgather_object",
           "DistributedGradientTape", "allreduce_gradients"]


def broadcast_variables(variables, root_rank: int, name: Optional[str] = None):
    """Assigns root rank's value to each variable on every process, eagerly or in a graph.
    Returns None eagerly; in a graph, the op that assigns them all (run it in a
    tf.compat.v1 Session; a tf.function runs it by itself).

    Arguments:
        variables: an iterable of tf.Variable (e.g. ``model.variables``,
            ``optimizer.variables``); the same variables, in the same order, on every rank.
        root_rank: the rank whose values win.
        name: base name of the broadcasts (generated when None).
    """
    variables = list(variables)
    base = array_ops.make_name("broadcast_variables", name)
    if tf.executing_eagerly():
        # Every broadcast in flight at once, then the assignments.
        try:
            handles = [array_ops.broadcast_async(v.numpy(), root_rank, "%s.%d" % (base, i))
                       for i, v in enumerate(variables)]
            for v, h in zip(variables, handles):
                v.assign(array_ops.synchronize(h))
        except Exception as e:  # noqa: BLE001 - re-raised as its tf.errors class
            raise to_tf_error(e) from None
        return None
    return tf.group(*[v.assign(broadcast(v, root_rank, name="%s.%d" % (base, i)))
                      for i, v in enumerate(variables)])


def broadcast_object(obj: Any, root_rank: int = 0, name: Optional[str] = None) -> Any:
    """Pickles ``obj`` on root rank and returns root rank's object on every process (eager)."""
    return array_ops.broadcast_object(obj, root_rank, name)


def allgather_object(obj: Any, name: Optional[str] = None) -> List[Any]:
    """Pickles ``obj`` on every process and returns every rank's object, in rank order (eager)."""
    return array_ops.allgather_object(obj, name)


def allreduce_gradients(grads, compression=Compression.none, op=Average,
                        gradient_predivide_factor: float = 1.0,
                        name: Optional[str] = None) -> List[Any]:
    """Reduces a list of gradients (None entries pass through) as one grouped allreduce.
    Sparse gradients (tf.IndexedSlices) are reduced dense. With ``op=Average`` and a
    ``gradient_predivide_factor`` f, gradients are divided by f before the sum and by size/f
    after."""
    if op not in (Average, Sum):
        raise ValueError("gradients are reduced with op=Average or op=Sum, got op=%r" % (op,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    grads = list(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present or size() == 1 and op == Average and gradient_predivide_factor == 1.0:
        return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    prescale, postscale, reduce_op = 1.0, 1.0, op
    if gradient_predivide_factor != 1.0:
        prescale = 1.0 / gradient_predivide_factor
        postscale = gradient_predivide_factor / size()
        reduce_op = Sum
    reduced = grouped_allreduce([grads[i] for i in present], compression=compression,
                                op=reduce_op, prescale_factor=prescale,
                                postscale_factor=postscale, name=name)
    out = list(grads)
    for i, r in zip(present, reduced):
        out[i] = r
    return out


class DistributedGradientTape(tf.GradientTape):
    """A tf.GradientTape whose ``gradient()`` averages the gradients across processes.

    .. code-block:: python

        with tf.GradientTape() as tape:
            loss = loss_fn(model(x), y)
        tape = dadt.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    The gradients of one call travel as one grouped (fused) allreduce.

    Arguments:
        gradtape: the tf.GradientTape that recorded the forward pass.
        device_dense, device_sparse: accepted for Horovod compatibility (CPU only).
        compression: Compression.none (default) or Compression.fp16.
        sparse_as_dense: accepted for Horovod compatibility; sparse gradients are always
            reduced dense.
        op: Average (default) or Sum.
        gradient_predivide_factor: see `allreduce_gradients`.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="", compression=Compression.none,
                 sparse_as_dense=True, op=Average, gradient_predivide_factor=1.0):
        # No super().__init__(): this tape takes over the recorded state of `gradtape`.
        self.__dict__.update(gradtape.__dict__)
        self._dadt_compression = compression
        self._dadt_op = op
        self._dadt_predivide = gradient_predivide_factor

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat = tf.nest.flatten(grads, expand_composites=False)
        reduced = allreduce_gradients(flat, self._dadt_compression, self._dadt_op,
                                      self._dadt_predivide)
        return tf.nest.pack_sequence_as(grads, reduced)
